"""The bench client's arithmetic: TTFT/TPOT/throughput, acceptance from SGLang's histogram,
per-position acceptance, pooling over levels, speedup."""

import math

import pytest

from dflash_sglang_tools.bench.level_stats import (
    acceptance,
    distinct,
    from_histogram,
    merge_repeats,
    paired_speedups,
    percentile,
    percentiles,
    pooled_levels,
    position_acceptance,
    speedup,
    sum_histograms,
    summarize,
    tpot_s,
)
from dflash_sglang_tools.bench.results import RequestResult


def request(tokens=11, ttft=0.5, latency=1.5, histogram=(), verify_ct=None, error=None):
    verify = sum(histogram) if verify_ct is None else verify_ct
    return RequestResult(10, tokens, ttft, latency, error, verify, list(histogram))


def test_percentile_matches_linear_interpolation():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert math.isclose(percentile(values, 99), 3.97)
    assert percentiles([]).mean is None
    assert percentiles([2.0]).p99 == 2.0


def test_tpot_is_decode_time_per_token_after_the_first():
    assert math.isclose(tpot_s(request(tokens=11, ttft=0.5, latency=1.5)), 0.1)
    assert tpot_s(request(tokens=1)) is None


def test_summarize_throughput_latency_and_errors():
    results = [request(11, 0.5, 1.5), request(21, 0.25, 2.25), request(error="HTTP 500")]
    level = summarize(results, concurrency=2, duration_s=4.0)
    assert (level.requests, level.errors, level.output_tokens) == (3, 1, 32)
    assert level.output_throughput == 8.0
    assert math.isclose(level.ttft_ms.mean, 375.0)
    assert math.isclose(level.tpot_ms.mean, 100.0)  # 1.0/10 and 2.0/20 s
    assert math.isclose(level.latency_ms.p50, 1875.0)
    assert level.acceptance.accept_length is None and level.acceptance.source == "none"


def test_acceptance_from_histogram():
    # 4 steps accepting 0 drafts, 2 accepting 1, 1 accepting 3, block 4 (3 drafts per step).
    acc = from_histogram([4, 2, 0, 1], block_size=4)
    assert acc.verify_steps == 7 and acc.source == "histogram"
    assert math.isclose(acc.accept_length, (4 * 1 + 2 * 2 + 1 * 4) / 7)
    assert math.isclose(acc.accept_rate, 5 / 21)
    assert acc.position_accepted == pytest.approx([3 / 7, 1 / 7, 1 / 7])
    assert acc.position_conditional == pytest.approx([3 / 7, 1 / 3, 1.0])


def test_position_acceptance_of_nothing_accepted_past_a_point():
    accepted, conditional = position_acceptance([5, 0, 0, 0])
    assert accepted == [0.0, 0.0, 0.0]
    assert conditional == [0.0, None, None]
    assert position_acceptance([0, 0]) == ([], [])


def test_histograms_pool_over_requests_and_pad_to_the_block():
    assert sum_histograms([[1, 2], [3], [0, 0, 4]]) == [4, 2, 4]
    acc = acceptance([request(histogram=[3, 1]), request(histogram=[1, 0, 1])], block_size=8)
    assert acc.histogram == [4, 1, 1, 0, 0, 0, 0, 0]
    assert len(acc.position_accepted) == 7


def test_acceptance_without_histogram_falls_back_to_sglang_ratio():
    acc = acceptance([request(tokens=30, verify_ct=10), request(tokens=10, verify_ct=0)], block_size=16)
    assert acc.source == "verify_ct" and acc.accept_length == 3.0 and acc.verify_steps == 10
    assert acc.histogram == [] and acc.accept_rate is None


def test_pooled_levels_and_speedup():
    one = summarize([request(histogram=[2, 1])], 1, 1.0, block_size=4)
    two = summarize([request(histogram=[0, 1, 1])], 4, 0.5, block_size=4)
    pooled = pooled_levels([one, two], block_size=4)
    assert pooled.histogram == [2, 2, 1, 0] and pooled.verify_steps == 5
    assert speedup(two, one) == 2.0
    assert speedup(two, None) is None


def test_repeats_merge_to_their_median_and_pair_with_the_baseline():
    """Three fresh-server repeats of a level: tok/s is the median repeat's, the speedup the median
    of the paired ratios, and a difference is claimed only where every repeat agrees on its side."""
    ours = merge_repeats([summarize([request()], 1, seconds, block_size=None) for seconds in (1.0, 0.5, 2.0)])
    base = merge_repeats([summarize([request()], 1, seconds, block_size=None) for seconds in (2.0, 1.0, 1.0)])
    assert ours.repeats == [11.0, 22.0, 5.5] and ours.output_throughput == 11.0 and ours.duration_s == 1.0
    assert paired_speedups(ours, base) == [2.0, 2.0, 0.5]
    assert speedup(ours, base) == 2.0
    assert not distinct(paired_speedups(ours, base)) and distinct([1.1, 1.2, 1.05])
    assert paired_speedups(ours, summarize([request()], 1, 1.0, block_size=None)) == []  # not repeated


def test_one_process_rounds_balance_places_and_carry_over_and_pair_the_ratios():
    """bench/one_process.py: over the design's rounds each policy takes each place equally often
    and follows each other equally often; the summary's sign test is two-sided, ties for neither."""
    from itertools import pairwise

    from dflash_sglang_tools.bench.one_process import round_order, round_orders, summary

    for count in (2, 3, 4, 5):
        orders = round_orders(count)
        assert len(orders) == (2 * count if count % 2 else count)
        assert all(sorted(order) == list(range(count)) for order in orders)
        for place in range(count):
            assert sorted(order[place] for order in orders) == sorted(
                list(range(count)) * (len(orders) // count)
            )
        follows = [pair for order in orders for pair in pairwise(order)]
        assert len(set(follows)) == count * (count - 1)
        assert len({follows.count(pair) for pair in set(follows)}) == 1  # each pair equally often
    assert round_order(["a", "b", "c"], 6) == round_order(["a", "b", "c"], 0)
    s = summary([1.2, 0.8, 1.1, 1.0, 1.25])
    assert (s["above"], s["rounds"], s["low"], s["high"]) == (3, 5, 0.8, 1.25)
    assert s["median"] == 1.1 and s["sign_p"] == pytest.approx(2 * 5 / 16)
    assert s["geomean"] == pytest.approx((1.2 * 0.8 * 1.1 * 1.0 * 1.25) ** 0.2)
    assert summary([0.5] * 8)["sign_p"] == pytest.approx(2 / 256)


def test_one_process_compares_the_servers_default_against_the_rest():
    """bench/one_process.py: the server's default comes first (the ratios' numerator and the
    warm-up's policy): per request on a chain, one budget a batch on a tree; `--without` may leave
    out others, never the default, and never all but it."""
    from dflash_sglang_tools.bench.one_process import policies

    chain = policies([8])
    assert list(chain) == ["per request", "one width a batch", "fixed 8"]
    assert chain["fixed 8"] == {"dflash_verify_width": 8, "dflash_request_lengths": 1}
    tree = policies([16, 32], trees=True, without=("per request",))
    assert list(tree) == ["one width a batch", "fixed 16", "fixed 32"]
    assert tree["one width a batch"] == {"dflash_verify_width": 0, "dflash_request_lengths": 0}
    for without in (("one width a batch",), ("per request", "fixed 8"), ("fixed 9",)):
        with pytest.raises(ValueError, match="--without"):
            policies([8], trees=True, without=without)
