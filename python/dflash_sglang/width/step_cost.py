"""What a decode step costs, by batch size and verify width: the adaptive width's cost model
(docs/adaptive.md), a pure function of measured times (width/step_times.py measures them).

    cost(bs, w) = target(bs * w) + drafter(bs) [w > 1]

the step's time as a function of the verify tokens (StepCost: a piecewise-linear curve over
measured points), plus the drafter's forward when there are drafts to verify. Where batch size bs
has drafted steps of its own (`by_batch`), they price its widths instead: a step's cost is not only
its tokens (per-request work dominates a small model on a CPU). A step of width 1 skips the
drafter, so where it has been measured it has its own curve over the batch size (`plain_points`).
The curve is where load enters: on a compute-bound target, bs * w tokens cost about w times bs
tokens, so wide batches pick small w. On a CPU every step also pays the scheduler's host work
between steps (`between_steps`).

A ragged step that drafts only some of its requests (PartialSteps): with per-request lengths the
drafter runs only for the n of bs requests that verify drafts (step/drafting.py). Such a step
costs the plain step plus a part of a uniform drafted step at the drafted requests' mean width:
part of that extra cost scales with n (the drafter's rows, the verify's extra tokens), part does
not (each forward's fixed work, which on a CPU serving a small model is most of it). The policy
prices the extra as

    (alpha + (1 - alpha) * n / bs) * (uniform step at the mean width - plain step)

and alpha, the fixed share, is learnt from the partial steps' own times: each step's implied
share, clamped to [0, 1], the median of the recent ones. Until a few have run, alpha is a low
prior: optimistic on purpose, as the curves are (a partial step priced too low runs and is timed;
one priced too high would never run to be corrected).

Nothing here touches SGLang; the worker feeds it host-side numbers.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

PRIOR_FIXED_SHARE = 0.25
MIN_STEPS = 3  # partial steps timed before their own share replaces the prior


@dataclass
class StepCost:
    """Seconds of a verify forward over `tokens` tokens, plus the drafter's seconds per request."""

    points: Sequence[tuple[int, float]]  # (verify tokens, seconds), at least two, increasing tokens
    drafter_per_request: float = 0.0
    drafter_fixed: float = 0.0
    plain_points: Sequence[tuple[int, float]] = ()  # measured width-1 steps: (batch size, seconds)
    # Measured drafted steps of one batch size: {batch size: [(width, seconds), ...]}.
    by_batch: dict = field(default_factory=dict)
    between_steps: float = 0.0  # host seconds between two steps, whatever their width
    # The share of a drafted step's extra cost that a ragged step drafting part of the batch pays
    # whatever its drafted requests (PartialSteps).
    partial_fixed: float = PRIOR_FIXED_SHARE

    def target(self, tokens: int) -> float:
        return interpolate(self.points, tokens)

    def step(self, batch_size: int, width: int) -> float:
        return self.forward(batch_size, width) + self.between_steps

    def plain_floor(self, batch_size: int) -> float:
        """The least a plain step of this batch size can cost: the plain curve at the largest
        batch size timed not above it (a step never costs less for more requests), else nothing."""
        below = [seconds for count, seconds in self.plain_points if count <= batch_size]
        return (below[-1] if below else 0.0) + self.between_steps

    def forward(self, batch_size: int, width: int) -> float:
        own = self.by_batch.get(batch_size)
        if width == 1 and self.plain_points:
            plain = interpolate(self.plain_points, batch_size)
            # A plain step does less than any drafted step of its batch size: a plain time above
            # one is noise (a busy machine when it was timed), and a width priced too high never
            # runs again to be corrected. A useless drafter verified whole blocks for hundreds of
            # steps where plain steps timed once at 213 ms stood against drafted ones at 120 ms.
            return min(plain, *(seconds for _, seconds in own)) if own else plain
        if width > 1 and own:  # this batch size's own steps, and around them:
            if width < own[0][0]:
                return self.below_narrowest(batch_size, width, own)
            widest, seconds = own[-1]
            if width > widest:  # what the extra tokens cost on the token curve (one own point
                # priced every wider width the same, and a hair more expected tokens ranked the
                # widest first among them: the worst case explored 16 tokens a request)
                return seconds + self.target(batch_size * width) - self.target(batch_size * widest)
            return interpolate(own, width)
        drafter = self.drafter_fixed + self.drafter_per_request * batch_size if width > 1 else 0.0
        return self.target(batch_size * width) + drafter

    def below_narrowest(self, batch_size: int, width: int, own) -> float:
        """A drafted width narrower than any this batch size has run: down from the narrowest at
        the slope of its own drafted steps, never below the plain step. A drafted step pays the
        drafter's forward at any width; a line from the plain step priced a good drafter's 2
        drafts at batch 16 at 24 ms against 50 for 7 (plain 18), and per-request lengths cut its
        requests short for that. With one own point, that line is all there is."""
        plain = interpolate(self.plain_points, batch_size) if self.plain_points else None
        (narrowest, seconds), (widest, widest_seconds) = own[0], own[-1]
        if widest == narrowest:
            line = ([(1, plain)] if plain is not None else []) + list(own)
            return interpolate(line, width)
        slope = max(0.0, (widest_seconds - seconds) / (widest - narrowest))  # noisy points may fall
        down = seconds - slope * (narrowest - width)
        return down if plain is None else max(plain, down)


def interpolate(points: Sequence[tuple[int, float]], x: int) -> float:
    """Piecewise-linear through the points (one point: flat). Below the first point, the first
    segment's slope; past the last, the chord's (first point to last). Optimistic on purpose: a
    width priced too low runs once and is measured, while one priced too high is never chosen and
    never measured (two noisy points at small counts used to price every wide tree out). Not the
    gentlest segment's: pooled (flat) segments made every wider width look free."""
    if len(points) == 1:
        return points[0][1]
    xs = [p for p, _ in points]
    if x > xs[-1]:
        (x0, y0), (x1, y1) = points[0], points[-1]
        return y1 + max((y1 - y0) / (x1 - x0), 0.0) * (x - x1)
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)  # the segment, or the first one
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 1e-9)  # extrapolation stays positive


class PartialSteps:
    """The recent ragged steps that drafted part of the batch, and the fixed share they imply."""

    def __init__(self, keep: int = 15):
        self.recent: deque = deque(maxlen=keep)  # (batch size, drafted requests, verify tokens, seconds)

    def record(self, batch_size: int, drafted: int, tokens: int, seconds: float) -> None:
        self.recent.append((batch_size, drafted, tokens, seconds))

    def fixed_share(self, cost) -> float:
        """alpha, from the recent partial steps priced on `cost` (a StepCost)."""
        shares = []
        for batch_size, drafted, tokens, seconds in self.recent:
            plain = cost.forward(batch_size, 1)
            uniform = cost.forward(batch_size, 1 + (tokens - batch_size) / drafted) - plain
            if uniform <= 0 or drafted >= batch_size:
                continue
            part = drafted / batch_size
            shares.append(min(max(((seconds - plain) / uniform - part) / (1 - part), 0.0), 1.0))
        return statistics.median(shares) if len(shares) >= MIN_STEPS else PRIOR_FIXED_SHARE
