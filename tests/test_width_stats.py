"""width/acceptance_profiles.py and width/step_times.py without a server: per-request acceptance fed
from SGLang's histogram and paired with the widths verified, oldest first (also one step behind, as
under the overlap loop); step times kept per token count, as a non-decreasing curve."""

from collections import deque
from types import SimpleNamespace

import pytest

from dflash_sglang.width.acceptance_profiles import RequestAcceptance
from dflash_sglang.width.step_times import StepTimes
from tests.width_helpers import non_decreasing

B = 4


def request(rid):
    return SimpleNamespace(rid=rid, spec_correct_drafts_histogram=[])


def scheduler_records(req, accepted_drafts):
    """What SGLang's result processing does per step (Req.update_spec_correct_drafts_histogram)."""
    hist = req.spec_correct_drafts_histogram
    hist.extend([0] * (accepted_drafts + 1 - len(hist)))
    hist[accepted_drafts] += 1


@pytest.mark.parametrize("lag", [0, 1])
def test_histogram_entries_pair_with_the_widths_they_were_verified_at(lag):
    stats, req = RequestAcceptance(B - 1), request("a")
    steps = [(4, 3), (1, 0), (2, 1), (4, 0), (3, 2)]  # (width, accepted drafts)
    done = []
    for width, accepted in steps:
        stats.profiles([req])
        stats.verified([req], width)
        done.append(accepted)
        if len(done) > lag:  # the scheduler processes results `lag` steps later
            scheduler_records(req, done[len(done) - lag - 1])
    for accepted in done[len(done) - lag :]:
        scheduler_records(req, accepted)
    profile = stats.profiles([req])[0]
    # Draft j (1-based) is tested when width - 1 >= j and drafts 1 .. j-1 were accepted:
    # draft 1 by (4,3) (2,1) (4,0) (3,2); draft 2 by (4,3) (3,2); draft 3 by (4,3). Width 1 tests none.
    assert profile.reached == [4, 2, 1]
    assert profile.accepted == [3, 2, 1]


def test_requests_keep_their_own_statistics():
    stats, a, b = RequestAcceptance(B - 1), request("a"), request("b")
    stats.verified([a, b], 4)
    scheduler_records(a, 3)
    scheduler_records(b, 0)
    pa, pb = stats.profiles([a, b])
    assert (pa.accepted, pb.accepted) == ([1, 1, 1], [0, 0, 0])
    assert pa.expected_tokens(4) > pb.expected_tokens(4)


def test_a_new_request_starts_from_the_pooled_acceptance():
    """Drafts that fail for every request so far: a new request expects about nothing of them
    from its first step, and its own steps still move its estimate."""
    stats = RequestAcceptance(B - 1)
    for n in range(20):
        old = request(f"old-{n}")
        stats.profiles([old])
        stats.verified([old], B)
        scheduler_records(old, 0)
        stats.profiles([old])
    new = stats.profiles([request("new")])[0]
    assert new.expected_tokens(B) < 1.1  # a flat prior would say 1.875
    for _ in range(6):  # this request's drafts are all accepted
        new.record(B, B - 1)
    assert new.acceptance()[0] > 0.5


def test_greedy_and_sampled_requests_start_from_their_own_kind():
    """Drafts fit every greedy request and no sampled one: a new greedy request expects the block,
    a new sampled one about nothing, where the pool of all would give both the middle; a kind that
    has seen no step yet starts from the pool of all."""

    def kind_of(rid, top_k):
        return SimpleNamespace(**vars(request(rid)), sampling_params=SimpleNamespace(top_k=top_k))

    stats = RequestAcceptance(B - 1)
    assert stats.profiles([kind_of("first", 20)])[0].expected_tokens(B) == pytest.approx(1.875)  # no pool
    for n in range(20):
        for old, accepted in ((kind_of(f"greedy-{n}", 1), B - 1), (kind_of(f"sampled-{n}", 20), 0)):
            stats.profiles([old])
            stats.verified([old], B)
            scheduler_records(old, accepted)
            stats.profiles([old])
    greedy_new, sampled_new = stats.profiles([kind_of("g", 1), kind_of("s", 50)])
    assert greedy_new.expected_tokens(B) > 3.5 and sampled_new.expected_tokens(B) < 1.1
    middle = stats.pooled.expected_tokens(B)
    assert sampled_new.expected_tokens(B) < middle < greedy_new.expected_tokens(B)
    stats.kinds[False] = type(stats.pooled)(B - 1)  # a kind not seen yet: the pool of all
    assert stats.profiles([kind_of("s2", 50)])[0].expected_tokens(B) == pytest.approx(middle)


def test_step_times_make_non_decreasing_curves_and_keep_plain_steps_apart():
    times = StepTimes("cpu")
    assert times.unmeasured_width(4, range(1, B + 1)) == 1  # plain decoding first, then the block, then half
    times.add(times.plain, 4, 0.004)
    assert times.unmeasured_width(4, range(1, B + 1)) == B
    times.add(times.seconds, 4 * B, 0.010)
    assert times.curve() is None and times.unmeasured_width(4, range(1, B + 1)) == B // 2
    times.add(times.seconds, 64, 0.008)  # noise: more tokens measured faster
    times.add(times.seconds, 4 * B, 0.020)  # the median of the two: 0.015
    curve = times.curve()  # the medians (0.015 over 2 steps, 0.008 over 1) pooled: 0.038 / 3
    assert curve.target(4 * B) == pytest.approx(0.038 / 3)
    assert curve.target(64) == pytest.approx(0.038 / 3)
    assert curve.step(4, 1) == pytest.approx(0.004)  # width 1: the plain steps' own curve
    started = times.start(2, 1)
    times.stop(started)
    started = times.start(2, 3)
    times.stop(started)
    assert 2 in times.plain and 6 in times.seconds
    # Plain decoding is timed once at every batch size: extrapolating its curve from small
    # batches could keep a wide batch off width 1.
    assert not times.unmeasured_plain(2) and times.unmeasured_plain(32)


def test_one_slow_step_does_not_reprice_a_width():
    """A CPU hiccup (one step 10x slower) leaves the median of the recent steps where it was."""
    times = StepTimes("cpu", window=5)
    times.add(times.plain, 1, 0.003)
    for seconds in (0.009, 0.009, 0.090, 0.009):
        times.add(times.seconds, 64, seconds)
    times.add(times.seconds, 32, 0.007)
    assert times.curve().target(64) == pytest.approx(0.009)
    for _ in range(5):  # the step really got slower: five in a row move it
        times.add(times.seconds, 64, 0.020)
    assert times.curve().target(64) == pytest.approx(0.020)


def test_step_times_keep_each_batch_size_apart():
    times = StepTimes("cpu")
    times.record(1, 1, 0.002)
    times.record(1, 8, 0.004)
    times.record(2, 4, 0.009)  # 8 tokens again, at batch 2: dearer per step
    times.record(1, 4, 0.003)
    curve = times.curve()
    assert curve.by_batch == {1: [(4, 0.003), (8, 0.004)], 2: [(4, 0.009)]}
    assert curve.step(1, 8) == pytest.approx(0.004) and curve.step(2, 4) == pytest.approx(0.009)


def test_step_times_price_the_host_gap_between_steps():
    times = StepTimes("cpu")
    for width in (1, 8, 4, 8):
        started = times.start(1, width)
        times.stop(started)
    assert len(times.gaps) == 3 and times.curve().between_steps == pytest.approx(sorted(times.gaps)[1])


def test_one_slow_step_at_a_rarely_run_width_does_not_raise_the_wider_ones():
    """Width 5, run once and slowly, lies above the curve of the widths timed five times each: it
    is left out (priced between 4 and 6) instead of lifting them. A running maximum said 14 ms for
    every width from 5 up; isotonic pooling alone, 10.5 ms."""
    table = {4: deque([0.0096] * 5), 5: deque([0.0140]), 6: deque([0.0100] * 5), 8: deque([0.0102] * 5)}
    points = dict(non_decreasing(table))
    assert points == {4: pytest.approx(0.0096), 6: pytest.approx(0.0100), 8: pytest.approx(0.0102)}


def test_a_rarely_run_width_may_lower_the_curve():
    """Optimistic: width 5 run once, faster than its neighbours, stays (pooled with width 4)."""
    table = {4: deque([0.0096] * 5), 5: deque([0.0090]), 8: deque([0.0102] * 5)}
    points = dict(non_decreasing(table))
    assert points[4] == points[5] == pytest.approx((5 * 0.0096 + 0.0090) / 6)
    assert points[8] == pytest.approx(0.0102)


def test_widths_apart_by_less_than_the_noise_cost_the_same():
    """Two ranks on two shared cores: steps of both widths spread over 60-150 ms. Their medians
    (105 and 130 ms) differ by less than two standard errors, so they are one cost and the wider
    width's extra tokens decide; a small, steady slope (9.2 against 10.2 ms) stays a slope."""
    noisy = {4: deque([0.062, 0.105, 0.147, 0.090, 0.128]), 8: deque([0.076, 0.133, 0.150, 0.091, 0.152])}
    points = dict(non_decreasing(noisy))
    assert points[4] == points[8] == pytest.approx((0.105 + 0.133) / 2)
    steady = {
        4: deque([0.0092, 0.0090, 0.0094, 0.0093, 0.0091]),
        8: deque([0.0102, 0.0100, 0.0104, 0.0101, 0.0103]),
    }
    points = dict(non_decreasing(steady))
    assert points[4] == pytest.approx(0.0092) and points[8] == pytest.approx(0.0102)


def test_steps_timed_at_zero_seconds_price_without_dividing_by_zero():
    """A clock too coarse for a step reads 0 s: the noise estimate skips such keys (the pricing
    runs inside the decode step, where an exception would take the server down)."""
    table = {4: deque([0.0] * 5), 8: deque([0.0] * 3), 16: deque([0.002] * 5)}
    points = dict(non_decreasing(table))
    assert points[4] == points[8] == 0.0 and points[16] == pytest.approx(0.002)
