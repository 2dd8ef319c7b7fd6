"""width/controller.py without a server: the forced width cycle and its startup errors (the decode
steps themselves are tested in tests/server/test_verify_width.py)."""

from types import SimpleNamespace

import pytest

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.width import controller
from dflash_sglang.width.controller import WIDTHS_ENV, VerifyWidth


@pytest.fixture(autouse=True)
def no_dp_attention(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)


def test_without_the_switch_every_step_verifies_the_whole_block(monkeypatch):
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.delenv(controller.ADAPTIVE_ENV, raising=False)  # the server tests' conftest pins it
    widths = VerifyWidth(8)
    assert [widths.choose(None).width for _ in range(3)] == [8, 8, 8]
    assert widths.describe.startswith("the block size (adaptive off by default: no server gave its reasons")


def test_the_forced_cycle_repeats_step_by_step(monkeypatch):
    monkeypatch.setenv(WIDTHS_ENV, "8, 1,4")
    widths = VerifyWidth(8)
    assert [widths.choose(None).width for _ in range(7)] == [8, 1, 4, 8, 1, 4, 8]


@pytest.mark.parametrize("text", ["0", "9", "4,x", ","])
def test_a_bad_cycle_fails_at_startup_naming_the_switch(monkeypatch, text):
    monkeypatch.setenv(WIDTHS_ENV, text)
    with pytest.raises(DFlashConfigError, match=WIDTHS_ENV):
        VerifyWidth(8)


def test_attention_dp_keeps_whole_blocks(monkeypatch):
    monkeypatch.setenv(WIDTHS_ENV, "4,8")
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: True)
    with pytest.raises(DFlashConfigError, match="--enable-dp-attention"):
        VerifyWidth(8)


def fake_batch(size: int, histogram_len: int = 8):
    reqs = [SimpleNamespace(rid=f"r{size}-{i}", spec_correct_drafts_histogram=[0] * histogram_len)
            for i in range(size)]  # fmt: skip
    return SimpleNamespace(reqs=reqs)


def test_adaptive_times_plain_decoding_at_each_new_batch_size(monkeypatch):
    """Width 1's cost curve is by batch size: a wide batch first times a plain step of its own
    instead of trusting the curve extrapolated from small batches."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8)
    times = widths.times
    times.add(times.plain, 1, 0.010)  # batch 1 measured: plain, the block and half of it
    times.add(times.seconds, 8, 0.030)
    times.add(times.seconds, 4, 0.020)
    assert widths.choose(fake_batch(32)).width == 1  # a batch size never seen: plain decoding, timed
    widths.step_done()
    assert 32 in times.plain and not times.unmeasured_plain(32)


def timed_at_batch_1(monkeypatch, four: float, eight: float, accepted: int) -> VerifyWidth:
    """An adaptive block of 8 timed at batch 1 (plain 10 ms, 4 and 8 tokens as given) whose pooled
    acceptance is `accepted` in 1000 at every position."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8)
    times = widths.times
    times.add(times.plain, 1, 0.010)
    times.add(times.seconds, 8, eight)
    times.add(times.seconds, 4, four)
    widths.acceptance.pooled.accepted = [accepted] * 7
    widths.acceptance.pooled.reached = [1000] * 7
    return widths


def test_a_new_batch_size_skips_the_plain_step_where_plain_decoding_cannot_win(monkeypatch):
    """Drafts accepted nine times in ten and drafted steps barely dearer than plain ones: plain
    decoding, even at batch 1's plain cost, would commit a fifth of the best width's tokens per
    second, so batch 2's first step verifies the block instead of timing a plain step."""
    widths = timed_at_batch_1(monkeypatch, four=0.0105, eight=0.011, accepted=900)
    widths.ran_widest = controller.WIDEST_FIRST  # past the first widest steps
    assert widths.choose(fake_batch(2)).width == 8
    assert widths.times.unmeasured_plain(2)


def test_a_new_batch_size_verifies_the_widest_first(monkeypatch):
    """Drafts that fit (half accepted) and costs known only from batch 1, where the token curve's
    slope (per-request work included) prices batch 16's whole block far above a narrow width: the
    first step at batch 16 verifies the whole block anyway, once, so that batch 16's own point
    prices its widths. A batch size already probed, or drafts that never fit, do not."""
    widths = timed_at_batch_1(monkeypatch, four=0.011, eight=0.030, accepted=500)
    widths.ran_widest = controller.WIDEST_FIRST  # no early-widest exploration in the way
    widths.times.add(widths.times.plain, 16, 0.040)  # no plain probe in the way either
    batch = fake_batch(16)
    assert widths.choose(batch).width == 8
    assert widths.choose(batch).width < 8 and widths.probed == {16}
    never = drafts_that_never_fit(monkeypatch)
    never.ran_widest = controller.WIDEST_FIRST
    never.times.add(never.times.plain, 16, 0.040)
    assert never.choose(fake_batch(16)).width == 1 and never.probed == set()


def drafts_that_never_fit(monkeypatch) -> VerifyWidth:
    """Timed at batch 1 (plain, 4 and 8 tokens), with a pooled acceptance of nil: plain decoding
    wins every choice."""
    return timed_at_batch_1(monkeypatch, four=0.020, eight=0.030, accepted=0)


def test_adaptive_explores_one_width_wider_every_so_often(monkeypatch):
    """Drafts that fail for every request: plain decoding wins, yet an exploring step verifies
    width 2 after EXPLORE_EVERY steps, then twice as far off each time while plain decoding still
    wins, up to EXPLORE_AT_MOST_EVERY, so drafts that start to fit would be seen; once a drafted
    width is rated best, the interval is EXPLORE_EVERY again."""
    widths = drafts_that_never_fit(monkeypatch)
    widths.ran_widest = controller.WIDEST_FIRST  # past the first widest steps (below)
    batch = fake_batch(1)
    every, most = controller.EXPLORE_EVERY, controller.EXPLORE_AT_MOST_EVERY
    chosen = [widths.choose(batch).width for _ in range(400)]
    explored = [i for i, width in enumerate(chosen) if width != 1]
    assert {chosen[i] for i in explored} == {2}
    gaps = [b - a for a, b in zip([-1, *explored], explored, strict=False)]
    assert gaps[:3] == [every, 2 * every, 4 * every] and set(gaps[3:]) == {most}
    widths.acceptance.pooled.accepted = [1000] * 7  # drafts that fit: a new request drafts
    fresh = SimpleNamespace(reqs=[SimpleNamespace(rid="new", spec_correct_drafts_histogram=[0] * 8)])
    after = [widths.choose(fresh).width for _ in range(3)]
    assert 1 not in after and widths.explore_every == every


def test_adaptive_explores_the_best_rated_wider_width(monkeypatch):
    """A tree settled at 5 nodes whose estimates nearly favour 16 explores 16, not the next wider
    budget (9): one wide step measures what every smaller tree would have accepted, and its cost."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8, tree_nodes=16)
    assert widths.candidates == [1, 2, 3, 5, 9, 16]
    times = widths.times
    times.add(times.plain, 1, 0.010)
    for tokens, seconds in ((3, 0.0110), (5, 0.0112), (9, 0.0150), (16, 0.0152)):
        times.add(times.seconds, tokens, seconds)
    pooled = widths.acceptance.pooled  # budgets 0, 1, 2, 4, 8, 15: mean accepted drafts
    pooled.prior_means, pooled.prior_weight = [0.0, 0.9, 1.5, 2.0, 2.1, 2.6], 1000.0
    widths.ran_widest = controller.WIDEST_FIRST  # past the first widest steps (below)
    widths.probed.add(1)  # and past batch 1's first step (test_a_new_batch_size_verifies_the_widest_first)
    batch = fake_batch(1)
    chosen = [widths.choose(batch).width for _ in range(controller.EXPLORE_EVERY)]
    assert set(chosen[:-1]) == {5} and chosen[-1] == 16


def test_adaptive_explores_the_widest_often_until_it_has_run_a_few_times(monkeypatch):
    """One widest step shows what every narrower width would have accepted: the first steps
    explore it every EXPLORE_FIRST_EVERY-th step until it has run WIDEST_FIRST times, where its
    estimated rate is near the best's (drafts accepted half the time, a narrower width rated best)."""
    widths = timed_at_batch_1(monkeypatch, four=0.011, eight=0.014, accepted=500)
    widths.probed.add(
        1
    )  # batch 1's first widest step apart (test_a_new_batch_size_verifies_the_widest_first)
    batch = fake_batch(1)
    first, every = controller.WIDEST_FIRST, controller.EXPLORE_FIRST_EVERY
    chosen = [widths.choose(batch).width for _ in range(first * every + controller.EXPLORE_EVERY)]
    widest = [i for i, width in enumerate(chosen) if width == 8]
    assert widest[:first] == [every * (k + 1) - 1 for k in range(first)]


def test_drafts_that_never_fit_do_not_explore_the_widest(monkeypatch):
    """The first burst: with drafts that never fit, a widest step costs three plain ones and
    shows nothing new, so the early widest steps are skipped; only width 2 is explored."""
    widths = drafts_that_never_fit(monkeypatch)
    batch = fake_batch(1)
    first, every = controller.WIDEST_FIRST, controller.EXPLORE_FIRST_EVERY
    chosen = [widths.choose(batch).width for _ in range(first * every + controller.EXPLORE_EVERY)]
    assert set(chosen) == {1, 2} and chosen.count(2) <= len(chosen) // controller.EXPLORE_EVERY


def test_the_pooled_acceptance_forgets_a_drafter_that_stopped_fitting(monkeypatch):
    """A drafter accepted at every position for a long while, then never: within a few pool
    half-lives of steps the pooled estimate (a new request's prior) is near nothing."""
    from dflash_sglang.width.acceptance_profiles import POOL_HALF_LIFE

    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    pooled = VerifyWidth(8).acceptance.pooled
    for _ in range(20 * POOL_HALF_LIFE):
        pooled.record(8, 7)
    assert pooled.acceptance()[0] > 0.95
    for _ in range(4 * POOL_HALF_LIFE):
        pooled.record(8, 0)
    assert pooled.acceptance()[0] < 0.1


@pytest.mark.parametrize(
    ("text", "default_off_because", "adaptive"),
    [("", None, True), ("0", None, False), ("1", None, True), ("", "graphs", False), ("1", "graphs", True)],
)
def test_the_adaptive_width_is_on_by_default_where_nothing_stops_it(
    monkeypatch, text, default_off_because, adaptive
):
    """Unset: on unless the server has a reason (adaptive_default_off_because); 0 and 1 decide."""
    monkeypatch.delenv(WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, text)
    widths = VerifyWidth(8, default_off_because=default_off_because)
    assert widths.adaptive is adaptive
    if not text:  # the startup log says it was the default, and how to change it
        switch = f"{controller.ADAPTIVE_ENV}={0 if adaptive else 1}"
        assert "default" in widths.describe and switch in widths.describe


def test_a_bad_adaptive_switch_fails_at_startup_naming_it(monkeypatch):
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "maybe")
    with pytest.raises(DFlashConfigError, match=controller.ADAPTIVE_ENV):
        VerifyWidth(8, default_off_because=None)


def test_attention_dp_keeps_the_default_off_and_refuses_the_switch(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: True)
    monkeypatch.delenv(controller.ADAPTIVE_ENV, raising=False)
    assert not VerifyWidth(8, default_off_because=None).adaptive
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    with pytest.raises(DFlashConfigError, match="--enable-dp-attention"):
        VerifyWidth(8, default_off_because=None)


def test_why_the_default_is_off():
    """Off where a narrow step would lose the verify graph the widest keeps; on otherwise (CPU:
    SGLang captures no verify graph for speculative decoding)."""
    from types import SimpleNamespace

    from dflash_sglang.width.controller import adaptive_default_off_because

    assert adaptive_default_off_because(SimpleNamespace(decode_cuda_graph_runner=None)) is None
    assert "graphs" in adaptive_default_off_because(SimpleNamespace(decode_cuda_graph_runner=object()))
