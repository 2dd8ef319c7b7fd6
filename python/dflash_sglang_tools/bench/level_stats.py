"""Request results -> one concurrency level's statistics. Pure arithmetic, no I/O.

Acceptance comes from what SGLang 0.5.23 reports per request at the end of a stream
(`return_spec_tokens_details`): `spec_verify_ct` and `spec_correct_drafts_histogram`, the number
of verify steps that accepted k drafts. SGLang does not expose the sequence of per-step accept
lengths, so everything per position is derived from that histogram: with chain acceptance a
step that accepted k drafts accepted block positions 1..k and no other.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from .results import Acceptance, LevelStats, Percentiles, RequestResult


def percentiles(values: list[float]) -> Percentiles:
    if not values:
        return Percentiles()
    return Percentiles(statistics.fmean(values), percentile(values, 50), percentile(values, 99))


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def tpot_s(result: RequestResult) -> float | None:
    """Decode time per output token after the first; None for one-token outputs."""
    if result.completion_tokens < 2:
        return None
    return (result.latency_s - result.ttft_s) / (result.completion_tokens - 1)


def sum_histograms(histograms: list[list[int]], width: int = 0) -> list[int]:
    """Element-wise sum, at least `width` bins (a block size B gives bins 0..B-1 drafts)."""
    pooled = [0] * max([len(h) for h in histograms] + [width])
    for histogram in histograms:
        for accepted, steps in enumerate(histogram):
            pooled[accepted] += steps
    return pooled


def position_acceptance(histogram: list[int]) -> tuple[list[float], list[float | None]]:
    """Per block position k = 1..len-1: the share of steps that accepted position k, and that
    share among the steps that accepted position k-1 (None where none did)."""
    steps = sum(histogram)
    if steps == 0:
        return [], []
    reached = [sum(histogram[k:]) for k in range(len(histogram))]  # steps accepting >= k drafts
    accepted = [reached[k] / steps for k in range(1, len(histogram))]
    conditional = [reached[k] / reached[k - 1] if reached[k - 1] else None for k in range(1, len(histogram))]
    return accepted, conditional


def acceptance(results: list[RequestResult], block_size: int | None) -> Acceptance:
    pooled = from_histogram(sum_histograms([r.spec_histogram for r in results], block_size or 0), block_size)
    if pooled.verify_steps:
        return pooled
    verify_steps = sum(r.spec_verify_ct for r in results)
    if verify_steps:  # a server without the histogram: SGLang's own ratio, first token included
        tokens = sum(r.completion_tokens for r in results if r.spec_verify_ct)
        return Acceptance(accept_length=tokens / verify_steps, verify_steps=verify_steps, source="verify_ct")
    return Acceptance()


def from_histogram(histogram: list[int], block_size: int | None) -> Acceptance:
    """Accept length, accept rate and per-position shares of a (pooled) histogram."""
    steps = sum(histogram)
    if not steps:
        return Acceptance()
    drafts = sum(k * count for k, count in enumerate(histogram))
    proposed = steps * (block_size - 1) if block_size and block_size > 1 else None
    accepted, conditional = position_acceptance(histogram)
    return Acceptance(
        accept_length=(drafts + steps) / steps,
        accept_rate=drafts / proposed if proposed else None,
        verify_steps=steps,
        source="histogram",
        histogram=list(histogram),
        position_accepted=accepted,
        position_conditional=conditional,
    )


def pooled_levels(levels: list[LevelStats], block_size: int | None) -> Acceptance:
    """One server's acceptance over all its concurrency levels."""
    return from_histogram(sum_histograms([lv.acceptance.histogram for lv in levels]), block_size)


def summarize(
    results: list[RequestResult], concurrency: int, duration_s: float, block_size=None
) -> LevelStats:
    ok = [r for r in results if r.error is None]
    output_tokens = sum(r.completion_tokens for r in ok)
    tpots = [t for t in map(tpot_s, ok) if t is not None]
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        errors=len(results) - len(ok),
        duration_s=duration_s,
        output_tokens=output_tokens,
        output_throughput=output_tokens / duration_s if duration_s > 0 else 0.0,
        ttft_ms=percentiles([r.ttft_s * 1e3 for r in ok]),
        tpot_ms=percentiles([t * 1e3 for t in tpots]),
        latency_ms=percentiles([r.latency_s * 1e3 for r in ok]),
        acceptance=acceptance(ok, block_size),
    )


def speedup(level: LevelStats | None, baseline: LevelStats | None) -> float | None:
    """The median of the paired ratios where both levels ran the same repeats, else the ratio."""
    ratios = paired_speedups(level, baseline)
    if ratios:
        return statistics.median(ratios)
    if level is None or baseline is None or not baseline.output_throughput:
        return None
    return level.output_throughput / baseline.output_throughput


def paired_speedups(level: LevelStats | None, baseline: LevelStats | None) -> list[float]:
    """Repeat r's throughput over the baseline's repeat r (run side by side), or [] where the
    levels did not both repeat the same number of times."""
    if level is None or baseline is None:
        return []
    if len(level.repeats) < 2 or len(level.repeats) != len(baseline.repeats):
        return []
    return [ours / base for ours, base in zip(level.repeats, baseline.repeats, strict=True) if base > 0]


def distinct(ratios: list[float]) -> bool:
    """Whether repeated ratios tell a difference: every repeat on the same side of 1."""
    return bool(ratios) and (min(ratios) > 1.0 or max(ratios) < 1.0)


def sign_test(above: int, trials: int) -> float:
    """One-sided p-value of `above` or more of `trials` paired ratios above 1 if neither server
    were faster (each side 1/2): a claim from repeats that each on their own overlap."""
    return sum(math.comb(trials, k) for k in range(above, trials + 1)) / 2**trials


def merge_repeats(levels: list[LevelStats]) -> LevelStats:
    """One level from its repeats: the median repeat's statistics, every repeat's throughput."""
    ordered = sorted(levels, key=lambda lv: lv.output_throughput)
    merged = dataclasses.replace(ordered[(len(ordered) - 1) // 2])
    merged.repeats = [lv.output_throughput for lv in levels]
    merged.output_throughput = statistics.median(merged.repeats)
    return merged
