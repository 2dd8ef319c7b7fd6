"""The adaptive width's pricing rules, each pinned where the width survey (tests/planted/width_survey.py,
docs/reliability.md "Blind spots of width/") found a planted bug that no test failed: the plain
floor, a narrow width's price against the plain step, when a first plain step is worth timing,
the curve's filter of rarely timed keys, the timing noise as a share, the next exploring step once
drafting wins, the tree hull, the prior past the positions seen, the kind pools' forgetting, and
a tree server's prior (its pool's forgetting, a request's prior kept current, the oldest requests
forgotten first, each request learnt at its own budget).
Every rule keeps outputs exact; a server with any of these wrong is only slower."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from dflash_sglang.width import controller
from dflash_sglang.width.acceptance_profiles import (
    POOL_HALF_LIFE,
    AcceptanceProfile,
    RequestAcceptance,
    TreeAcceptance,
    pool_forget,
)
from dflash_sglang.width.controller import EXPLORE_EVERY, VerifyWidth
from dflash_sglang.width.ranking import Estimate, plain_could_win
from dflash_sglang.width.request_lengths import upper_hull
from dflash_sglang.width.step_cost import StepCost
from dflash_sglang.width.step_times import SOLID, StepTimes, relative_noise

PLAIN = [(1, 0.010), (4, 0.030), (8, 0.050)]  # plain steps by batch size, seconds
TOKENS = [(8, 0.012), (64, 0.060)]  # drafted steps by verify tokens


def test_the_plain_floor_is_the_largest_batch_timed_not_above():
    """A step never costs less for more requests: at batch 6 the floor is batch 4's plain step
    (plus the host's gap), not batch 1's."""
    cost = StepCost(TOKENS, plain_points=PLAIN, between_steps=0.002)
    assert cost.plain_floor(6) == pytest.approx(0.030 + 0.002)
    assert cost.plain_floor(8) == pytest.approx(0.050 + 0.002)
    assert cost.plain_floor(1) == pytest.approx(0.010 + 0.002)


@pytest.mark.parametrize("seed", range(20))
def test_a_drafted_width_is_never_priced_below_the_plain_step(seed):
    """Below the narrowest drafted width a batch size has run, the price falls at its own slope,
    but never under its plain step: a drafted step runs the drafter too."""
    rng = random.Random(seed)
    plain = [(bs, 0.004 * bs + rng.uniform(0, 0.004)) for bs in (1, 2, 4, 8)]
    batch_size = rng.choice((1, 2, 4, 8))
    narrowest = rng.randint(3, 6)
    base = dict(plain)[batch_size] + rng.uniform(0.0005, 0.003)  # a drafted step just above plain
    own = [(narrowest, base), (narrowest + 2, base + rng.uniform(0.001, 0.02))]  # a steep slope
    cost = StepCost(TOKENS, plain_points=plain, by_batch={batch_size: own})
    for width in range(2, narrowest):
        assert cost.forward(batch_size, width) >= cost.forward(batch_size, 1) - 1e-12


def test_a_first_plain_step_is_worth_timing_where_plain_at_its_floor_beats_the_best():
    """plain_could_win: the best drafted width gives 200 tokens/s; a plain step at batch 1 costs
    at least 4 ms (250 tokens/s), so plain decoding could win and its first step is timed. Where
    the floor is 10 ms (100 tokens/s) it could not."""
    ranked = [Estimate(4, 4.0, 0.020), Estimate(1, 1.0, 0.010)]
    assert plain_could_win(ranked, StepCost(TOKENS, plain_points=[(1, 0.004)]), 1)
    assert not plain_could_win(ranked, StepCost(TOKENS, plain_points=[(1, 0.010)]), 1)
    assert plain_could_win([Estimate(1, 1.0, 0.010), *ranked], StepCost(TOKENS), 1)


def test_a_key_timed_once_never_raises_the_curve():
    """Solid keys (timed SOLID times or more) at 8 and 16 verify tokens; 24 tokens timed once at
    three times their cost (a CPU hiccup): the curve at 24 stays where the solid keys put it."""
    times = StepTimes("cpu")
    for seconds in (0.0100, 0.0101, 0.0099, 0.0102, 0.0098):
        times.record(1, 8, seconds)
    for seconds in (0.0120, 0.0121, 0.0119, 0.0122, 0.0118):
        times.record(2, 8, seconds)
    times.record(3, 8, 0.030)
    assert len(times.seconds[24]) < SOLID
    times.record(1, 1, 0.008)
    curve = times.curve()
    assert curve.target(24) < 0.016  # the solid chord's extrapolation, about 0.014


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
def test_the_timing_noise_is_a_share_of_each_keys_median(scale):
    """relative_noise is unitless: the same steps in seconds, ms or ks give the same share (1.4826
    MAD / median over the solid keys), so a key timed once is assumed to vary by that share."""
    keys = {8: (0.010 * scale, 5, 0.0002 * scale), 16: (0.020 * scale, 5, 0.0004 * scale)}
    assert relative_noise(keys) == pytest.approx(1.4826 * 0.02)


def test_a_step_rating_a_drafted_width_best_brings_the_next_exploring_step_near(monkeypatch):
    """After plain decoding won a while (exploring steps backed off to 256 steps apart), a step
    that rates a drafted width best puts the next exploring step EXPLORE_EVERY steps away."""
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)  # no SGLang config here
    monkeypatch.delenv(controller.WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8)
    widths.steps, widths.explore_every, widths.next_explore = 100, 256, 356
    widths.drafting_wins()
    assert (widths.explore_every, widths.next_explore) == (EXPLORE_EVERY, 100 + EXPLORE_EVERY)


def test_the_tree_hull_drops_a_point_under_the_chord():
    """upper_hull keeps only points where each step adds fewer tokens a node than the one before:
    (2, 1.2) lies under the chord from (1, 1.0) to (4, 2.0)."""
    assert upper_hull([(1, 1.0), (2, 1.2), (4, 2.0)]) == [(1, 1.0), (4, 2.0)]


@pytest.mark.parametrize("seed", range(20))
def test_the_tree_hull_is_concave_and_rising(seed):
    rng = random.Random(seed)
    xs = sorted(rng.sample(range(1, 40), 8))
    points = [(x, rng.uniform(0, 5)) for x in xs]
    hull = upper_hull(points)
    slopes = [(y1 - y0) / (x1 - x0) for (x0, y0), (x1, y1) in zip(hull, hull[1:], strict=False)]
    assert all(s > 0 for s in slopes)
    assert all(a > b for a, b in zip(slopes, slopes[1:], strict=False))
    assert hull[0] == points[0] and set(hull) <= set(points)


def test_a_position_never_tested_takes_the_estimate_before_it():
    """A request verifying 2 of 8 (one draft) that accepts it every step: the untested positions
    carry position 1's rate (about 0.95), not the flat prior's 0.5, so wider widths stay worth
    exploring."""
    profile = AcceptanceProfile(7)
    for _ in range(20):
        profile.record(2, 1)
    rates = profile.acceptance()
    assert rates[0] == pytest.approx(21 / 22)
    assert all(rate == pytest.approx(rates[0]) for rate in rates[1:])


@pytest.mark.parametrize("greedy", [True, False])
def test_each_kinds_pool_forgets_a_drafter_that_stopped_fitting(greedy):
    """A new greedy (or sampled) request starts from its kind's pool: after long steps accepting
    every draft, then a few half-lives of steps accepting none, that pool is near nothing."""
    acceptance = RequestAcceptance(7, pool_forget=pool_forget())
    req = SimpleNamespace(
        rid="r", sampling_params=SimpleNamespace(top_k=1 if greedy else 50),
        spec_correct_drafts_histogram=[0] * 8,
    )  # fmt: skip
    req.spec_correct_drafts_histogram[7] = 20 * POOL_HALF_LIFE
    acceptance.profiles([req])
    assert acceptance.kinds[greedy].acceptance()[0] > 0.95
    req.spec_correct_drafts_histogram[0] = 4 * POOL_HALF_LIFE
    acceptance.profiles([req])
    assert acceptance.kinds[greedy].acceptance()[0] < 0.1


def tree_acceptance(keep: int = 4096, forget: float = 1.0) -> TreeAcceptance:
    return TreeAcceptance([1, 2, 4, 8, 16], 7, "cpu", keep=keep, pool_forget=forget)  # budgets 0 1 3 7 15


def test_a_tree_servers_pool_forgets_a_drafter_that_stopped_fitting():
    acceptance = tree_acceptance(forget=pool_forget())
    for _ in range(20 * POOL_HALF_LIFE):
        acceptance.pooled.record(15, [0, 1, 3, 5, 7])
    assert acceptance.pooled.means()[-1] > 6.5
    for _ in range(4 * POOL_HALF_LIFE):
        acceptance.pooled.record(15, [0, 0, 0, 0, 0])
    assert acceptance.pooled.means()[-1] < 0.5


def test_a_tree_requests_prior_is_the_servers_latest_pool():
    """A request's prior follows the pooled means as they move, not the ones of its first step."""
    acceptance = tree_acceptance()
    req = SimpleNamespace(rid="r")
    (first,) = acceptance.profiles([req])
    before = list(first.prior_means)
    for _ in range(50):
        acceptance.pooled.record(15, [0, 1, 3, 5, 7])
    (again,) = acceptance.profiles([req])
    assert again is first and again.prior_means == acceptance.pooled.means() != before


def test_a_full_tree_table_forgets_its_oldest_requests():
    acceptance = tree_acceptance(keep=4)
    live = {}
    for rid in "abcd":
        live[rid] = acceptance._profile(rid)
    acceptance._profile("e")
    assert set(acceptance.entries) == {"c", "d", "e"}
    assert acceptance._profile("d") is live["d"]  # a live request keeps what it learnt


def test_a_ragged_tree_step_is_learnt_at_each_requests_own_budget(monkeypatch):
    """step_done hands the tree's walk to the acceptance with each request's own node count
    (plan.lengths), so a request walked at 4 nodes is censored at budget 3, not the batch's."""
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    monkeypatch.delenv(controller.WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8, tree_nodes=16, default_off_because=None)
    seen = []
    monkeypatch.setattr(widths.acceptance, "walked", lambda *args: seen.append(args))
    plan = SimpleNamespace(lengths=(16, 4))
    verified = SimpleNamespace(path_rows="walk", accepted=SimpleNamespace(lengths="accepted"))
    widths.step_done(plan, ["r0", "r1"], verified)
    assert seen == [(["r0", "r1"], "walk", "accepted", (16, 4))]
