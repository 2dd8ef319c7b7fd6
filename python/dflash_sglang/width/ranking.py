"""What a ragged step that drafts only some of its requests costs (docs/adaptive.md).

With per-request lengths the drafter runs only for the n of bs requests that verify drafts
(step/drafting.py). Such a step costs the plain step plus a part of a uniform drafted step at the
drafted requests' mean width: part of that extra cost scales with n (the drafter's rows, the
verify's extra tokens), part does not (each forward's fixed work, which on a CPU serving a small
model is most of it). The policy prices the extra as

    (alpha + (1 - alpha) * n / bs) * (uniform step at the mean width - plain step)

and alpha, the fixed share, is learnt here from the partial steps' own times: each step's implied
share, clamped to [0, 1], the median of the recent ones. Until a few have run, alpha is a low
prior: optimistic on purpose, as the curves are (a partial step priced too low runs and is timed;
one priced too high would never run to be corrected).
"""

from __future__ import annotations

import statistics
from collections import deque

PRIOR_FIXED_SHARE = 0.25
MIN_STEPS = 3  # partial steps timed before their own share replaces the prior


class PartialSteps:
    def __init__(self, keep: int = 15):
        self.recent: deque = deque(maxlen=keep)  # (batch size, drafted requests, verify tokens, seconds)

    def record(self, batch_size: int, drafted: int, tokens: int, seconds: float) -> None:
        self.recent.append((batch_size, drafted, tokens, seconds))

    def fixed_share(self, cost) -> float:
        """alpha, from the recent partial steps priced on `cost` (a width/policy.StepCost)."""
        shares = []
        for batch_size, drafted, tokens, seconds in self.recent:
            plain = cost.forward(batch_size, 1)
            uniform = cost.forward(batch_size, 1 + (tokens - batch_size) / drafted) - plain
            if uniform <= 0 or drafted >= batch_size:
                continue
            part = drafted / batch_size
            shares.append(min(max(((seconds - plain) / uniform - part) / (1 - part), 0.0), 1.0))
        return statistics.median(shares) if len(shares) >= MIN_STEPS else PRIOR_FIXED_SHARE
