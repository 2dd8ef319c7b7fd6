"""width/ranking.py, width/step_cost.py and width/acceptance_profiles.py: the chosen width equals a
brute-force search that computes expectations by enumerating acceptance outcomes; the per-position
estimates recover known acceptance rates from steps of mixed widths (censoring); and load moves the
choice the way the issue expects."""

import itertools
import random

import pytest

from dflash_sglang.width.acceptance_profiles import AcceptanceProfile
from dflash_sglang.width.ranking import PLAIN_MARGIN, ranked_widths
from dflash_sglang.width.step_cost import StepCost
from tests.width_helpers import best_width

B = 8
WIDTHS = list(range(1, B + 1))


def profile_with(rates: list[float]) -> AcceptanceProfile:
    """A profile whose estimates are exactly `rates` (counts placed to hit them under the prior)."""
    profile = AcceptanceProfile(B - 1, prior=(0.0, 0.0))
    profile.reached = [1000] * (B - 1)
    profile.accepted = [round(1000 * r) for r in rates]
    return profile


def brute_force_expected_tokens(rates: list[float], width: int) -> float:
    """sum over outcomes a = accepted drafts of (a + 1) * P(a), enumerated."""
    total = 0.0
    for a in range(width):  # 0 .. width - 1 drafts accepted
        p = 1.0
        for j in range(a):
            p *= rates[j]
        if a < width - 1:
            p *= 1 - rates[a]
        total += (a + 1) * p
    return total


def brute_force_width(rate_sets, seconds, drafter) -> int:
    """The width of most tokens per second; plain decoding unless beaten by PLAIN_MARGIN."""
    bs = len(rate_sets)
    best, best_rate, plain_rate = None, -1.0, None
    for w in WIDTHS:
        tokens = sum(brute_force_expected_tokens(r, w) for r in rate_sets)
        rate = tokens / (seconds(bs * w) + (drafter(bs) if w > 1 else 0.0))
        plain_rate = rate if w == 1 else plain_rate
        if rate > best_rate + 1e-12:
            best, best_rate = w, rate
    return 1 if best_rate < (1 + PLAIN_MARGIN) * plain_rate else best


def cost_of(seconds, drafter_fixed, drafter_per_request, max_tokens) -> StepCost:
    points = [(t, seconds(t)) for t in range(1, max_tokens + 1)]
    return StepCost(points, drafter_per_request=drafter_per_request, drafter_fixed=drafter_fixed)


CURVES = {
    "memory-bound": lambda t: 0.020 + 0.00002 * t,  # nearly flat: verifying is almost free
    "compute-bound": lambda t: 0.002 + 0.0008 * t,  # linear: time follows the tokens
    "knee": lambda t: 0.010 + max(0, t - 64) * 0.0004,  # flat up to 64 tokens, then linear
}


@pytest.mark.parametrize("curve", sorted(CURVES))
@pytest.mark.parametrize("bs", [1, 4, 16, 32])
def test_the_choice_equals_brute_force(curve, bs):
    rng = random.Random(f"{curve}-{bs}")  # str seeds are deterministic across processes
    seconds = CURVES[curve]
    drafter_fixed, drafter_per_request = 0.002, 0.0001
    for _ in range(20):
        rate_sets = [[rng.choice([0.1, 0.5, 0.8, 0.95]) for _ in range(B - 1)] for _ in range(bs)]
        profiles = [profile_with(r) for r in rate_sets]
        cost = cost_of(seconds, drafter_fixed, drafter_per_request, bs * B)
        for profile, rates in zip(profiles, rate_sets, strict=True):
            for w in WIDTHS:
                assert profile.expected_tokens(w) == pytest.approx(brute_force_expected_tokens(rates, w))
        want = brute_force_width(rate_sets, seconds, lambda n: drafter_fixed + drafter_per_request * n)
        assert best_width(profiles, cost, WIDTHS) == want


def test_estimates_recover_known_rates_from_steps_of_mixed_widths():
    rng = random.Random(0)
    rates = [0.9, 0.7, 0.5, 0.5, 0.3, 0.2, 0.1]
    profile = AcceptanceProfile(B - 1)
    for _ in range(400_000):
        width = rng.choice(WIDTHS)
        accepted = 0
        while accepted < width - 1 and rng.random() < rates[accepted]:
            accepted += 1
        profile.record(width, accepted)
    # Later positions are reached less often (censored by the width and by earlier rejections):
    # each is reached often enough that four binomial standard errors stay small.
    for got, want, reached in zip(profile.acceptance(), rates, profile.reached, strict=True):
        assert reached >= 400
        assert got == pytest.approx(want, abs=4 * (want * (1 - want) / reached) ** 0.5)


def test_measured_plain_steps_decide_width_one():
    """Width 1 skips the drafter: where plain steps were measured cheaper than drafted ones, drafts
    that are rarely accepted choose plain decoding even on a flat curve (without plain points, a
    width-2 step's 1.2 tokens at the curve's price beat plain by more than PLAIN_MARGIN)."""
    bad = [profile_with([0.2] * (B - 1))]
    flat = StepCost([(2, 0.010), (16, 0.0101)], plain_points=[(1, 0.006)])
    assert best_width(bad, flat, WIDTHS) == 1
    without = StepCost([(2, 0.010), (16, 0.0101)])  # extrapolated from drafted steps only
    assert best_width(bad, without, WIDTHS) > 1


def test_a_plain_step_is_never_priced_above_a_drafted_step_of_its_batch_size():
    """Plain steps timed on a busy machine (213 ms) against drafted ones at 120 ms: the plain cost
    is capped at the cheapest drafted step of that batch size, so drafts never accepted still
    choose plain decoding (a tie of rates goes to the smaller width)."""
    bad = [profile_with([0.0] * (B - 1))] * 8
    noisy = StepCost(
        [(16, 0.120), (64, 0.121)], plain_points=[(8, 0.213)], by_batch={8: [(2, 0.120), (8, 0.121)]}
    )
    assert noisy.forward(8, 1) == 0.120
    assert best_width(bad, noisy, WIDTHS) == 1


def test_load_moves_the_choice():
    """Good drafts: the whole block alone, on a flat curve; on a compute-bound curve a wide batch
    verifies less; drafts that are never accepted: plain decoding at any load."""
    good, bad = [0.9] * (B - 1), [0.0] * (B - 1)
    flat, linear = (
        cost_of(CURVES["memory-bound"], 0.001, 0, 256),
        cost_of(CURVES["compute-bound"], 0.001, 0, 256),
    )
    assert best_width([profile_with(good)], flat, WIDTHS) == B
    assert best_width([profile_with(good) for _ in range(32)], linear, WIDTHS) < B
    for cost, bs in itertools.product((flat, linear), (1, 32)):
        assert best_width([profile_with(bad) for _ in range(bs)], cost, WIDTHS) == 1


def test_past_the_last_measured_count_the_curve_takes_its_chord():
    """Two noisy points at small counts (a steep last segment) must not price wide steps out: past
    the last point the curve rises at its chord's slope (first point to last), so a wide step
    looks cheap enough to run once and be measured; a flat (pooled) segment does not make every
    wider width free."""
    cost = StepCost([(8, 0.010), (16, 0.014), (20, 0.0141)])
    assert cost.target(16) == pytest.approx(0.014)  # inside: the segment's own line
    assert cost.target(40) == pytest.approx(0.0141 + 20 * 0.0041 / 12)
    assert cost.target(4) == pytest.approx(0.008)  # below: the first segment's slope
    assert StepCost([(8, 0.010), (16, 0.009)]).target(64) == pytest.approx(0.009)  # never falls


def test_ranked_widths_orders_every_width_by_rate():
    good = [profile_with([0.9] * (B - 1))]
    flat = cost_of(CURVES["memory-bound"], 0.001, 0, 64)
    ranked = ranked_widths(good, flat, WIDTHS)
    assert (
        sorted(e.width for e in ranked) == WIDTHS and ranked[0].width == best_width(good, flat, WIDTHS) == B
    )
    assert ranked[-1].width == 1 and ranked[-1].tokens == 1.0
    rates = [e.tokens / e.seconds for e in ranked]
    assert rates == sorted(rates, reverse=True) and "8: " in str(ranked[0])


def test_a_batch_size_with_steps_of_its_own_is_priced_by_them():
    """8 tokens at batch 2 cost what batch 2's steps cost, not what 8 tokens at batch 1 did; below
    its narrowest measured width, its own drafted steps' slope down from there (a drafted step
    pays the drafter's forward at any width), never below its plain step; other batch sizes, the
    token curve."""
    cost = StepCost([(4, 0.004), (8, 0.005)], plain_points=[(1, 0.002), (2, 0.003)],
                    by_batch={2: [(4, 0.009), (8, 0.010)]})  # fmt: skip
    assert cost.step(2, 4) == pytest.approx(0.009)
    assert cost.step(2, 6) == pytest.approx(0.0095)
    assert cost.step(2, 2) == pytest.approx(0.009 - 2 * (0.010 - 0.009) / 4)  # 4 to 8's slope
    steep = StepCost([(4, 0.004)], plain_points=[(2, 0.003)], by_batch={2: [(4, 0.009), (5, 0.012)]})
    assert steep.step(2, 2) == pytest.approx(0.003)  # down at 3 ms a width: the plain step's floor
    falling = StepCost([(4, 0.004)], plain_points=[(2, 0.003)], by_batch={2: [(4, 0.009), (8, 0.008)]})
    assert falling.step(2, 2) == pytest.approx(0.009)  # noisy points falling: no dearer than 4
    one_point = StepCost([(4, 0.004), (8, 0.005)], plain_points=[(3, 0.003)], by_batch={3: [(4, 0.006)]})
    assert one_point.step(3, 2) == pytest.approx(0.003 + (0.006 - 0.003) / 3)  # one point: a line
    assert cost.step(2, 1) == pytest.approx(0.003)
    assert cost.step(1, 8) == pytest.approx(0.005)  # no batch-1 points: the token curve
    # Past its widest own point (4 at batch 3): its time plus what the extra tokens cost on the
    # token curve, never flat.
    one_point = StepCost([(4, 0.004), (8, 0.005)], plain_points=[(3, 0.003)], by_batch={3: [(2, 0.006)]})
    assert one_point.step(3, 4) == pytest.approx(0.006 + one_point.target(12) - one_point.target(6))
    assert one_point.step(3, 4) > one_point.step(3, 2)


def test_the_host_work_between_steps_counts_against_narrow_widths():
    """Each step pays the scheduler's work between steps: the more steps per token (narrow widths),
    the more of it. Counted, it moves the choice wider."""
    profiles = [profile_with([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])]
    forward = [(w, 0.004 + 0.002 * w) for w in range(2, B + 1)]
    alone = StepCost(forward, plain_points=[(1, 0.003)])
    with_host = StepCost(forward, plain_points=[(1, 0.003)], between_steps=0.010)
    assert with_host.step(1, 4) == pytest.approx(alone.step(1, 4) + 0.010)
    assert best_width(profiles, alone, WIDTHS) == 1 and best_width(profiles, with_host, WIDTHS) == 5
