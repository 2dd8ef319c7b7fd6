"""width/verify_width.py without a server: the forced width cycle and its startup errors (the decode
steps themselves are tested in tests/server/test_verify_width.py)."""

import pytest

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.width import verify_width
from dflash_sglang.width.verify_width import WIDTHS_ENV, VerifyWidth


@pytest.fixture(autouse=True)
def no_dp_attention(monkeypatch):
    monkeypatch.setattr(verify_width.dp_attention, "enabled", lambda: False)


def test_without_the_switch_every_step_verifies_the_whole_block(monkeypatch):
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    widths = VerifyWidth(8)
    assert [widths.choose(None) for _ in range(3)] == [8, 8, 8]
    assert widths.describe == "the block size"


def test_the_forced_cycle_repeats_step_by_step(monkeypatch):
    monkeypatch.setenv(WIDTHS_ENV, "8, 1,4")
    widths = VerifyWidth(8)
    assert [widths.choose(None) for _ in range(7)] == [8, 1, 4, 8, 1, 4, 8]


@pytest.mark.parametrize("text", ["0", "9", "4,x", ","])
def test_a_bad_cycle_fails_at_startup_naming_the_switch(monkeypatch, text):
    monkeypatch.setenv(WIDTHS_ENV, text)
    with pytest.raises(DFlashConfigError, match=WIDTHS_ENV):
        VerifyWidth(8)


def test_attention_dp_keeps_whole_blocks(monkeypatch):
    monkeypatch.setenv(WIDTHS_ENV, "4,8")
    monkeypatch.setattr(verify_width.dp_attention, "enabled", lambda: True)
    with pytest.raises(DFlashConfigError, match="--enable-dp-attention"):
        VerifyWidth(8)


def fake_batch(size: int, histogram_len: int = 8):
    from types import SimpleNamespace

    reqs = [SimpleNamespace(rid=f"r{size}-{i}", spec_correct_drafts_histogram=[0] * histogram_len)
            for i in range(size)]  # fmt: skip
    return SimpleNamespace(reqs=reqs)


def test_adaptive_times_plain_decoding_at_each_new_batch_size(monkeypatch):
    """Width 1's cost curve is by batch size: a wide batch first times a plain step of its own
    instead of trusting the curve extrapolated from small batches."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(verify_width.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8)
    times = widths.times
    times.add(times.plain, 1, 0.010)  # batch 1 measured: plain, the block and half of it
    times.add(times.seconds, 8, 0.030)
    times.add(times.seconds, 4, 0.020)
    assert widths.choose(fake_batch(32)) == 1  # a batch size never seen: plain decoding, timed
    widths.step_done()
    assert 32 in times.plain and not times.unmeasured_plain(32)


def test_adaptive_explores_one_width_wider_every_so_often(monkeypatch):
    """Drafts that fail for every request: plain decoding wins, yet every EXPLORE_EVERY-th step
    verifies width 2, so drafts that start to fit would be seen."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(verify_width.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8)
    times = widths.times
    times.add(times.plain, 1, 0.010)
    times.add(times.seconds, 8, 0.030)
    times.add(times.seconds, 4, 0.020)
    batch = fake_batch(1)
    widths.acceptance.pooled.accepted = [0] * 7
    widths.acceptance.pooled.reached = [1000] * 7
    chosen = [widths.choose(batch) for _ in range(3 * verify_width.EXPLORE_EVERY)]
    explored = [i for i, width in enumerate(chosen) if width != 1]
    every = verify_width.EXPLORE_EVERY
    assert explored == [every - 1, 2 * every - 1, 3 * every - 1] and {chosen[i] for i in explored} == {2}
