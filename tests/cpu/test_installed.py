"""The CPU layer as SGLang loads it: in a fresh interpreter, `load_plugins()` applies every hook
(HookRegistry only logs a target it cannot resolve, so this checks none was skipped), DFLASH on
cpu resolves instead of being refused, and the hooked constructors and calls work on CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_sglang.cpu.hooks import HOOKS
from dflash_sglang.cpu.platform.checks import SOURCE
from dflash_sglang_tools.testing.tiny_dense import write_tiny_pair
from dflash_sglang_tools.testing.tiny_hybrid import write_tiny_hybrid_pair


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    pair = write_tiny_pair(tmp_path_factory.mktemp("pair"), block_size=8)
    hybrid = write_tiny_hybrid_pair(tmp_path_factory.mktemp("hybrid"), block_size=8)
    env = {**os.environ, "DFLASH_SGLANG_WORKER": "builtin", "HF_HUB_OFFLINE": "1"}
    probe = Path(__file__).with_name("installed_probe.py")
    done = subprocess.run(
        [sys.executable, str(probe), str(pair.target), str(pair.draft), str(hybrid.target)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sglang_refuses_dflash_on_cpu_without_the_plugin(report):
    assert "not supported" in report["before"]["error"]


def test_every_hook_is_applied(report):
    assert {hook.target for hook in HOOKS} <= set(report["patched"])


def test_dflash_on_cpu_resolves_with_a_torch_native_draft(report):
    after = report["after"]
    assert after["device"] == "cpu"
    assert after["draft_backend"] == "torch_native"
    assert after["num_draft_tokens"] == 8
    assert SOURCE in after["sources"]  # the draft-backend declaration
    assert "error" not in after


def test_hooked_calls_work_on_cpu(report):
    assert report["rope"] == "RotaryEmbedding"
    assert report["pool_native_move"] is True
    assert report["record_stream_cpu"] == "ok"
    assert report["propagated"] == dict.fromkeys(report["propagated"], True)
    assert len(report["propagated"]) == 3


def test_extra_buffer_mamba_cache_resolves_on_cpu_only_with_the_plugin(report):
    assert "platform support" in report["extra_buffer_before"]["error"]
    assert report["extra_buffer_after"] == {"strategy": "extra_buffer"}
