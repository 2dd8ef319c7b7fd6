"""The startup decisions as one value (settings.py): its startup line says what the server logged
before the move, word for word, and each reason is None where nothing is off."""

from types import SimpleNamespace

import pytest

from dflash_sglang.runtime import streams
from dflash_sglang.settings import DFlashSettings
from dflash_sglang.tree.switches import TreeSettings


def settings(**changes) -> DFlashSettings:
    fields = dict(
        worker="dflash_sglang.overlap.DFlashOverlapWorker", schedule="overlap", block_size=8, tree=None,
        draft_vocab=None, window_size=None, drafter_stream_off_because=None, simulated=None,
        sampled_drafts=True, block_verification=False, drafts_are="sampled from the drafter's law",
        adaptive_default_off_because=None, ragged_off_because=None, partial_drafter=False,
        eager_context_because=None, check_host_sync=True, enable_metrics=False, tp_rank=0,
        draft_layers=2, target_layer_ids=(1, 3),
    )  # fmt: skip
    return DFlashSettings(**{**fields, **changes})


def test_the_startup_line_keeps_its_words():
    line = settings().startup_line("adaptive")
    assert line == (
        "dflash_sglang: DFLASH served by dflash_sglang.overlap.DFlashOverlapWorker (overlap schedule, "
        "drafter stream on, host-sync check on; block size 8, verify width adaptive, draft window off, "
        "draft layers 2, target layers [1, 3]; drafts at T > 0: sampled from the drafter's law; "
        "plain steps' context deferred)"
    )


def test_reasons_are_values_and_the_line_names_them():
    plain = settings(
        worker="dflash_sglang.worker.DFlashWorker", schedule="synchronous", check_host_sync=False,
        drafter_stream_off_because="the synchronous schedule", window_size=12,
        eager_context_because="PD disaggregation moves the KV", tree=TreeSettings(4, 16),
    )  # fmt: skip
    assert not plain.drafter_stream and not plain.defers_context and plain.tree_nodes == 16
    assert settings().drafter_stream and settings().defers_context and settings().tree_nodes is None
    line = plain.startup_line("the block size")
    assert "DFlashWorker (synchronous schedule, drafter stream off; block size 8" in line
    assert "verify width a tree of 16 nodes, the block size, draft window 12" in line
    assert "plain steps' context injected at once (PD disaggregation moves the KV)" in line


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        settings().block_size = 4


@pytest.mark.parametrize(
    ("schedule", "memory", "switch", "device", "because"),
    [("synchronous", {}, "1", "cuda", "the synchronous schedule"),
     ("overlap", {"enable_hierarchical_cache": True}, "1", "cuda", "the hierarchical cache"),
     ("overlap", {"enable_unified_memory": True}, "1", "cuda", "the unified pool"),
     ("overlap", {}, "0", "cuda", "DFLASH_SGLANG_DRAFTER_STREAM=0"),
     ("overlap", {}, "1", "cpu", "no CUDA device"),
     ("overlap", {}, "1", "cuda", None)],
)  # fmt: skip
def test_the_drafter_stream_is_the_overlap_workers_unless_a_reason_says_no(
    monkeypatch, schedule, memory, switch, device, because
):
    memory = {"enable_hierarchical_cache": False, "enable_unified_memory": False, **memory}
    monkeypatch.setattr(streams, "get_memory", lambda: SimpleNamespace(**memory))
    monkeypatch.setenv(streams.ENV_FLAG, switch)
    found = streams.drafter_stream_off_because(schedule, device)
    assert found == because if because is None else because in found
