"""What decode steps cost as they run: the times behind the adaptive width's cost model
(docs/adaptive.md; width/step_cost.py prices widths from them), from host-side data only.

The seconds of each decode step by its batch size and width, and by its verify tokens (batch size
x width) for batch sizes without points of their own; the median of the last few steps per key
(one slow step, a CPU's scheduling hiccup, must not price a width out until it runs again),
adjacent keys within the timing noise pooled, a key timed once or twice never raising a curve;
steps of width 1 (no drafter) kept apart, by batch size, and ragged steps drafting part of the
batch apart again (PartialSteps). Timed with CUDA events read a step later (never waiting) on a
GPU, or the host clock on a CPU, where the step computes synchronously.
Nothing here reads device data on the host.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Sequence

import torch

from .step_cost import PartialSteps, StepCost, interpolate


class StepTimes:
    """Seconds per decode step by verify tokens, as steps finish."""

    def __init__(self, device, window: int = 5):
        self.on_gpu = torch.device(device).type == "cuda"
        self.window = window
        self.seconds: dict[int, deque] = {}  # drafted steps' recent seconds, by verify tokens
        self.plain: dict[int, deque] = {}  # width-1 steps' (no drafter), by batch size
        # Drafted steps again, by batch size and then width: where a batch size has its own
        # points, they price its widths (a CPU step is mostly per-request cost, so 8 tokens at
        # batch 2 cost more than 8 at batch 1, and one curve over tokens mixed the two).
        self.by_batch: dict[int, dict[int, deque]] = {}
        self.open: deque = deque()  # steps not read yet
        self.partial = PartialSteps()  # ragged steps drafting part of the batch
        # On a CPU the scheduler's host work between two steps adds to every step, whatever its
        # width: left out, it made narrow steps (more of them per token) look cheaper than they
        # are. The median of recent gaps (an idle server's long gaps are the few). On a GPU the
        # overlap loop hides that work behind the device, and events time the device.
        self.gaps: deque = deque(maxlen=15)
        self.stopped_at: float | None = None
        # Each table's curve, and each key's statistics, until they change: a step changes two
        # keys, and recomputing every table every step took 1 ms of host time at batch 8.
        self.cached: dict[int, list] = {}
        self.key_cache: dict[tuple[int, int], tuple[float, int, float]] = {}

    def start(self, batch_size: int, width: int, tokens: int | None = None, drafted: int | None = None):
        """A step of `width` a request, or of `tokens` verify tokens in all (per-request lengths:
        then priced at the nearest whole width by batch size, and by its own tokens); `drafted`:
        a ragged step that drafted only that many of its requests (PartialSteps)."""
        key = (batch_size, width, tokens or batch_size * width, drafted)
        if not self.on_gpu and self.stopped_at is not None:
            self.gaps.append(time.perf_counter() - self.stopped_at)
        if self.on_gpu:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return key, start
        return key, time.perf_counter()

    def stop(self, started) -> None:
        key, start = started
        if self.on_gpu:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.open.append((key, start, end))
            while self.open and self.open[0][2].query():  # finished steps only: never wait
                (batch_size, width, tokens, drafted), start, end = self.open.popleft()
                self.record(batch_size, width, start.elapsed_time(end) / 1000, tokens, drafted)
        else:
            self.stopped_at = time.perf_counter()
            batch_size, width, tokens, drafted = key
            self.record(batch_size, width, self.stopped_at - start, tokens, drafted)

    def record(
        self,
        batch_size: int,
        width: int,
        seconds: float,
        tokens: int | None = None,
        drafted: int | None = None,
    ) -> None:
        if drafted is not None:  # cheaper than the uniform step its keys price: not a point of theirs
            self.partial.record(batch_size, drafted, tokens, seconds)
        elif width == 1:
            self.add(self.plain, batch_size, seconds)
        else:
            self.add(self.seconds, tokens or batch_size * width, seconds)
            self.add(self.by_batch.setdefault(batch_size, {}), width, seconds)

    def add(self, table: dict, count: int, seconds: float) -> None:
        table.setdefault(count, deque(maxlen=self.window)).append(seconds)
        self.cached.pop(id(table), None)
        self.key_cache.pop((id(table), count), None)

    def points(self, table: dict) -> list[tuple[int, float]]:
        """The table's curve (non_decreasing_levels), from cached statistics of the keys that did not
        change."""
        name = id(table)
        if name not in self.cached:
            keys = {}
            for count, recent in table.items():
                if (name, count) not in self.key_cache:
                    self.key_cache[name, count] = key_stats(recent)
                keys[count] = self.key_cache[name, count]
            self.cached[name] = non_decreasing_levels(keys)
        return self.cached[name]

    def curve(self) -> StepCost | None:
        """The cost curves over the counts seen (made non-decreasing: more tokens never cost less,
        whatever the noise); None until two drafted token counts and a width-1 step are seen."""
        if len(self.seconds) < 2 or not self.plain:
            return None
        by_batch = {bs: self.points(widths) for bs, widths in self.by_batch.items()}
        between = statistics.median(self.gaps) if self.gaps else 0.0
        cost = StepCost(
            self.points(self.seconds), plain_points=self.points(self.plain), by_batch=by_batch,
            between_steps=between,
        )  # fmt: skip
        cost.partial_fixed = self.partial.fixed_share(cost)
        return cost

    def unmeasured_plain(self, batch_size: int) -> bool:
        """Plain decoding not timed yet at this batch size. Its curve is by batch size, and one
        extrapolated from small batches can hide width 1 at a load never seen (a wide batch of
        requests whose drafts fail would verify width 2 forever). The worker times it only where
        plain decoding could win at its least possible cost (ranking.plain_could_win)."""
        return batch_size not in self.plain

    def unmeasured_width(self, batch_size: int, widths: Sequence[int]) -> int | None:
        """A width still to time before the curves exist: plain, the widest, the one nearest half
        of it (of the candidate `widths`)."""
        if not self.plain:
            return 1
        widest = max(widths)
        half = min((w for w in widths if 1 < w < widest), key=lambda w: abs(2 * w - widest), default=None)
        for width in (widest, half):
            if width is not None and batch_size * width not in self.seconds:
                return width
        return None


# Two adjacent keys whose medians differ by less than this many standard errors of the difference
# count as one cost: without evidence that a narrower width is cheaper, the wider one (more
# tokens a step) wins. Two ranks sharing two cores timed the same step at 30-250 ms, and medians
# of five priced a width 2x dearer than its neighbour on noise alone.
NOISE_Z = 2.0


# A key timed fewer times than this may lower the curve, never raise it: one CPU hiccup at a
# rarely run width (22 ms where its neighbours took 10) priced every wider width out through the
# curve's slope, and a width priced too high is never run again to be corrected.
SOLID = 3


def non_decreasing_levels(keys: dict[int, tuple[float, int, float]]) -> list[tuple[int, float]]:
    """The keys' medians (key_stats), made non-decreasing: keys timed fewer than SOLID times are
    left out where they lie above the curve of the others (optimistic: a width priced too low runs
    and is measured), then adjacent violators are pooled (isotonic least squares, each median
    weighted by its steps), and so are adjacent keys whose medians differ by less than the timing
    noise."""
    solid = {count: stats for count, stats in keys.items() if stats[1] >= SOLID}
    if solid:
        reference = pooled_levels(solid)
        keys = {
            count: stats
            for count, stats in keys.items()
            if stats[1] >= SOLID or stats[0] <= interpolate(reference, count)
        }
    return pooled_levels(keys)


def key_stats(recent) -> tuple[float, int, float]:
    """A key's median, its number of steps and their median absolute deviation."""
    median = middle(recent)
    return median, len(recent), middle([abs(v - median) for v in recent])


def middle(values) -> float:
    ordered, n = sorted(values), len(values)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def pooled_levels(keys: dict[int, tuple[float, int, float]]) -> list[tuple[int, float]]:
    """Pool adjacent violators and keys closer than the noise (NOISE_Z standard errors). A running
    maximum let one slow median at a rarely run key raise every key above it: a chain server priced
    width 8 at batch 1 1.2 ms dearer than width 4, where forced runs of each took the same time."""
    noise = relative_noise(keys)
    blocks: list[list] = []  # [first key, total weight, weighted sum, variance of the level]
    for count, (median, n, deviation) in sorted(keys.items()):
        # 1.4826 MAD: a normal spread's standard deviation; 1.2533 sd / sqrt(n): a median's error.
        spread = 1.4826 * deviation if n >= SOLID else noise * median  # the table's, for few steps
        blocks.append([count, n, n * median, (1.2533 * spread) ** 2 / n])
        while len(blocks) > 1 and indistinct(blocks[-2], blocks[-1]):
            _, weight, total, variance = blocks.pop()
            low = blocks[-1]
            low[3] = (low[1] ** 2 * low[3] + weight**2 * variance) / (low[1] + weight) ** 2
            low[1] += weight
            low[2] += total
    level = {first: total / weight for first, weight, total, _ in blocks}
    points, value = [], 0.0
    for count in sorted(keys):
        value = level.get(count, value)
        points.append((count, value))
    return points


def indistinct(low: list, high: list) -> bool:
    """The higher key measured cheaper, or dearer by less than the noise."""
    difference = high[2] / high[1] - low[2] / low[1]
    return difference < NOISE_Z * (low[3] + high[3]) ** 0.5


def relative_noise(keys: dict[int, tuple[float, int, float]]) -> float:
    """The typical spread of one step's time relative to its key's median (a standard deviation
    from the MAD), over the keys timed SOLID times or more: what a key run once or twice is
    assumed to vary by."""
    # A zero median (a clock too coarse for the step) has no relative spread: skipped, not divided.
    spreads = [1.4826 * dev / median for median, n, dev in keys.values() if n >= SOLID and median > 0]
    return middle(spreads) if spreads else 0.0
