"""Startup: the plugin comes from the installed distribution's entry point, the env switches
work, and a drafter that cannot work stops the server at startup with the field named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from sglang.srt.server_args import ServerArgs

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.step.draft_window import refuse_unsupported_setups
from dflash_sglang_tools.testing.server import ServerError, SGLangServer
from dflash_sglang_tools.testing.tiny_dense import TinyShape

from .pairs import make_pair


def test_entry_point_comes_from_the_installed_distribution():
    (ours,) = [ep for ep in metadata.entry_points(group="sglang.srt.plugins") if ep.name == "dflash_sglang"]
    assert ours.value == "dflash_sglang.plugin:register"
    assert ours.dist.name == "dflash-sglang"


PROBE = """
import sys, types
from sglang.srt.plugins import load_plugins
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
load_plugins()
for schedule in sys.argv[1:]:
    args = types.SimpleNamespace(disable_overlap_schedule=schedule == "sync")
    worker = SpeculativeAlgorithm.DFLASH.create_worker(args)
    print(worker.__module__ + "." + worker.__qualname__)
"""


BUILTIN = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"
OURS = {"overlap": "dflash_sglang.overlap.DFlashOverlapWorker", "sync": "dflash_sglang.worker.DFlashWorker"}


@pytest.mark.parametrize(
    "env,expected",
    [({}, OURS),
     ({"DFLASH_SGLANG_WORKER": "builtin"}, {"overlap": BUILTIN}),
     ({"DFLASH_SGLANG_DISABLE": "1"}, {"sync": BUILTIN})],
)  # fmt: skip
def test_env_switches_select_the_worker_through_sglangs_own_plugin_loader(env, expected):
    # A fresh interpreter an environment (the plugin reads it once, at load): SGLang discovers
    # the entry point and applies the hooks itself; both schedules where the environment is one.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_SGLANG")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *expected], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-len(expected) :] == list(expected.values())


OVERLAP_OFF = {"SGLANG_ENABLE_SPEC_V2": "", "SGLANG_ENABLE_DFLASH_SPEC_V2": ""}


@pytest.mark.parametrize(
    "server,worker,schedule",
    [("dflash8_overlap", "overlap.DFlashOverlapWorker", "overlap"),
     ("dflash8_plain", "worker.DFlashWorker", "synchronous"),
     ("spec_v2_but_disabled", "worker.DFlashWorker", "synchronous")],
    ids=["dflash-spec-v2", "no-flag", "spec-v2-but-disabled"],
)  # fmt: skip
def test_overlap_toggles_as_the_seed_cards_use_them(request, server, worker, schedule):
    """The startup log line says which worker runs under which SGLang loop: the session's servers
    run with SGLANG_ENABLE_DFLASH_SPEC_V2=1 and with no flag (conftest.py)."""
    log = request.getfixturevalue(server).log_path.read_text()
    assert f"DFLASH served by dflash_sglang.{worker} ({schedule} schedule" in log
    assert "plain steps' context deferred)" in log  # step/deferred_context.py, on by default
    assert "subprocesses fork from the launcher" in log  # the test session's switch (conftest.py)
    assert_no_warning_of_ours(log)


@pytest.fixture(scope="module")
def spec_v2_but_disabled(pair8):
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair8.draft,
            "--disable-overlap-schedule"]  # fmt: skip
    with SGLangServer(pair8.target, args, env={**OVERLAP_OFF, "SGLANG_ENABLE_SPEC_V2": "1"}) as server:
        yield server


def assert_no_warning_of_ours(log: str) -> None:
    """A clean startup: SGLang's hook registry has nothing to warn about our hooks (it did when
    two of them wrapped `_handle_dflash` AROUND), and no warning names this package."""
    assert "Multiple AROUND hooks" not in log and "Multiple REPLACE hooks" not in log
    ours = [line for line in log.splitlines() if "dflash_sglang" in line and "warn" in line.lower()]
    assert not ours, ours


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("broken"), 8)


def assert_startup_fails_naming(pair, args, words, error="DFlashConfigError") -> None:
    with pytest.raises(ServerError) as err:
        SGLangServer(pair.target, args, timeout=240).start()
    log = err.value.args[0]
    assert error in log
    for word in words:
        assert word in log


def break_draft(pair, tmp_path, edit) -> str:
    broken = tmp_path / "draft"
    broken.mkdir()
    for file in pair.draft.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    config = json.loads((broken / "config.json").read_text())
    edit(config)
    (broken / "config.json").write_text(json.dumps(config))
    return str(broken)


def drafter_for_a_narrower_target(pair, tmp_path) -> str:
    """A consistent drafter (weights match its config) made for a hidden-32 target."""
    return str(make_pair(tmp_path / "narrow", 8, TinyShape(hidden_size=32, hot_tokens=3)).draft)


def copy_draft(pair, tmp_path) -> Path:
    broken = tmp_path / "draft"
    broken.mkdir()
    for file in pair.draft.iterdir():
        (broken / file.name).write_bytes(file.read_bytes())
    return broken


def weights_file(draft: Path) -> Path:
    return draft / "model.safetensors"


def truncated_weights(pair, tmp_path) -> Path:
    draft = copy_draft(pair, tmp_path)
    data = weights_file(draft).read_bytes()
    weights_file(draft).write_bytes(data[: len(data) // 2])
    return draft


def weights_of_another_drafter(pair, tmp_path) -> Path:
    """This drafter's config, the weights of one made for a hidden-32 target."""
    draft = copy_draft(pair, tmp_path)
    weights_file(draft).write_bytes(
        weights_file(Path(drafter_for_a_narrower_target(pair, tmp_path))).read_bytes()
    )
    return draft


@pytest.mark.parametrize(
    "make_draft,words,error",
    [
        (truncated_weights, ["cannot be read", "truncated"], "DFlashConfigError"),
        (weights_of_another_drafter, ["drafter weight", "has shape"], "ValueError"),
    ],
    ids=["truncated-weights", "weights-of-another-drafter"],
)
def test_broken_drafter_files_fail_at_startup_naming_the_file(pair, tmp_path, make_draft, words, error):
    draft = make_draft(pair, tmp_path)
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft]
    assert_startup_fails_naming(pair, args, [*words, str(draft)] if error != "ValueError" else words, error)


def lilicorr_drafter(pair, tmp_path) -> str:
    """A drafter declaring a generation SGLang serves and we do not (LiLiCorr): refused by name
    before SGLang builds it (a DFlash2 drafter, before we served it, crashed the worker)."""

    def lilicorr(config):
        config["architectures"] = ["LiLiCorrDraftModel"]

    return break_draft(pair, tmp_path, lilicorr)


@pytest.mark.parametrize(
    "make_draft,words",
    [
        (drafter_for_a_narrower_target, ["hidden_size", "32", "64"]),
        (lilicorr_drafter, ["LiLiCorrDraftModel", "DFLASH_SGLANG_WORKER=builtin"]),
    ],
    ids=["hidden-size-mismatch", "lilicorr-architecture"],
)
def test_broken_drafter_fails_at_startup_naming_the_field(pair, tmp_path, make_draft, words):
    draft = make_draft(pair, tmp_path)
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
            "--speculative-num-draft-tokens", "8"]  # fmt: skip
    assert_startup_fails_naming(pair, args, words)


def test_a_draft_window_with_pages_fails_at_startup_naming_both(pair):
    """The refusal reaches the operator from the worker's startup; the other setups the ring
    cannot serve go through the same check (test_a_draft_window_refuses_what_its_ring_cannot_serve)."""
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-num-draft-tokens", "4", "--speculative-draft-window-size", "8",
            "--page-size", "16"]  # fmt: skip
    assert_startup_fails_naming(pair, args, ["--speculative-draft-window-size 8", "--page-size 16"])


@pytest.mark.parametrize(
    "setting,words",
    [({"page_size": 16}, ["--page-size 16"]),
     ({"enable_hierarchical_cache": True}, ["--enable-hierarchical-cache"]),
     ({"disaggregation_mode": "decode"}, ["--disaggregation-mode decode"])],
    ids=["pages", "hicache", "pd"],
)  # fmt: skip
def test_a_draft_window_refuses_what_its_ring_cannot_serve(setting, words):
    server_args = ServerArgs(model_path="unused", **setting)
    with pytest.raises(DFlashConfigError) as err:
        refuse_unsupported_setups(server_args, 8)
    for word in ["--speculative-draft-window-size 8", *words]:
        assert word in str(err.value)
