"""What the adaptive verify width learns between steps, from host-side data only (docs/adaptive.md).

- Acceptance per request: SGLang's scheduler keeps, per request, a histogram of accepted drafts
  per step (`Req.spec_correct_drafts_histogram`, host side, updated as each step's result is
  processed). New entries are paired, oldest first, with the widths this worker verified the
  request's steps at, and fed to the request's `AcceptanceProfile`. Under the overlap loop the
  histogram lags one step: the pairing is by order, so the lag costs nothing but freshness.
  Every step also feeds a pooled profile of all requests, and a new request starts from it (a
  request's first steps are sized by what drafts achieve on this server, not by a flat prior).
- Step cost: the seconds of each decode step by its verify tokens (batch size x width), the
  median of the last few steps per token count (one slow step, a CPU's scheduling hiccup, must not
  price a width out until it runs again); steps of width 1 (no drafter) kept apart, by batch size.
  Timed with CUDA events read a step later (never waiting) on a GPU, or the host clock on a CPU,
  where the step computes synchronously.
Nothing here reads device data on the host.
"""

from __future__ import annotations

import statistics
import time
from collections import deque

import torch

from .policy import AcceptanceProfile, StepCost


class RequestAcceptance:
    def __init__(self, positions: int, keep: int = 4096):
        self.positions, self.keep = positions, keep
        self.entries: dict[str, tuple[AcceptanceProfile, list[int], deque]] = {}
        self.pooled = AcceptanceProfile(positions)

    def _entry(self, req):
        entry = self.entries.get(req.rid)
        if entry is None:
            if len(self.entries) >= self.keep:  # forget the oldest requests, long finished
                for rid in list(self.entries)[: self.keep // 2]:
                    del self.entries[rid]
            profile = AcceptanceProfile(self.positions, prior_rates=self.pooled.acceptance())
            entry = self.entries[req.rid] = (profile, [], deque(maxlen=8))
        return entry

    def profiles(self, reqs) -> list[AcceptanceProfile]:
        """Each request's profile, updated with the steps processed since the last call."""
        out = []
        for req in reqs:
            profile, seen, pending = self._entry(req)
            histogram = req.spec_correct_drafts_histogram
            seen.extend([0] * (len(histogram) - len(seen)))
            for accepted, count in enumerate(histogram):
                for _ in range(count - seen[accepted]):
                    width = pending.popleft() if pending else self.positions + 1
                    profile.record(width, accepted)
                    self.pooled.record(width, accepted)
                seen[accepted] = count
            out.append(profile)
        return out

    def verified(self, reqs, width: int) -> None:
        for req in reqs:
            self._entry(req)[2].append(width)


class StepTimes:
    """Seconds per decode step by verify tokens, as steps finish."""

    def __init__(self, device, window: int = 5):
        self.on_gpu = torch.device(device).type == "cuda"
        self.window = window
        self.seconds: dict[int, deque] = {}  # drafted steps' recent seconds, by verify tokens
        self.plain: dict[int, deque] = {}  # width-1 steps' (no drafter), by batch size
        self.open: deque = deque()  # steps not read yet

    def start(self, batch_size: int, width: int):
        key = (self.plain, batch_size) if width == 1 else (self.seconds, batch_size * width)
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
                key, start, end = self.open.popleft()
                self.add(*key, start.elapsed_time(end) / 1000)
        else:
            self.add(*key, time.perf_counter() - start)

    def add(self, table: dict, count: int, seconds: float) -> None:
        table.setdefault(count, deque(maxlen=self.window)).append(seconds)

    def curve(self) -> StepCost | None:
        """The cost curves over the counts seen (made non-decreasing: more tokens never cost less,
        whatever the noise); None until two drafted token counts and a width-1 step are seen."""
        if len(self.seconds) < 2 or not self.plain:
            return None
        return StepCost(non_decreasing(self.seconds), plain_points=non_decreasing(self.plain))

    def unmeasured_plain(self, batch_size: int) -> bool:
        """Plain decoding not timed yet at this batch size. Its curve is by batch size, and one
        extrapolated from small batches can hide width 1 at a load never seen (a wide batch of
        requests whose drafts fail would verify width 2 forever)."""
        return batch_size not in self.plain

    def unmeasured_width(self, batch_size: int, block_size: int) -> int | None:
        """A width still to time before the curves exist: the whole block, half of it, plain."""
        if not self.plain:
            return 1
        for width in (block_size, max(2, block_size // 2)):
            if batch_size * width not in self.seconds:
                return width
        return None


def non_decreasing(table: dict[int, deque]) -> list[tuple[int, float]]:
    points, most = [], 0.0
    for count, recent in sorted(table.items()):
        most = max(most, statistics.median(recent))
        points.append((count, most))
    return points
