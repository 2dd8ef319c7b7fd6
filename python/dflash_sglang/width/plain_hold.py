"""A ranking that chose plain decoding, held for a few steps (issue 64: a plain step costs a plain step).

Where drafts rarely fit (a sampled load at T 0.6-1.0, a drafter that never fits), the adaptive
width ranks every candidate each step and keeps choosing width 1. The ranking (the step cost
curve, each width's expected tokens, each request's own length) was about 0.03 of a target forward
a step on the tiny pair at concurrency 1 and 8, T 1.0 (docs/benchmarks.md, "A plain step against
no-spec's"): the largest of the policy's own costs beside a plain step. Between two plain steps
nothing it reads moves but the plain step's own time: a plain step verifies no draft, so no
request's acceptance estimate learns from it. So a ranking that put plain decoding first for the
whole batch holds, for the same requests, for up to HELD_STEPS steps, and never past the next
exploring step (which still comes on the controller's schedule) nor across a change of the batch,
and never on a new server's turn to look at the widest (the controller's WIDEST_FIRST).
"""

from __future__ import annotations

from typing import NamedTuple

HELD_STEPS = 8  # steps a plain ranking holds at most (its estimates move by one plain time a step)


class _Hold(NamedTuple):
    rids: tuple  # the batch's requests, in order, when plain decoding was ranked first
    until: int  # the step count at which the hold lapses


class PlainHold:
    """The latest ranking that chose plain decoding for the whole batch, while it holds."""

    def __init__(self):
        self.held: _Hold | None = None
        self.used = 0  # steps that reused a held ranking (tests/test_plain_hold.py reads it)

    def hold(self, reqs, step: int) -> None:
        """Plain decoding was ranked first for `reqs` at step `step`."""
        self.held = _Hold(tuple(req.rid for req in reqs), step + HELD_STEPS)

    def release(self) -> None:
        self.held = None

    def holds(self, reqs, step: int, next_explore: int) -> bool:
        """Whether the held ranking stands for this step's batch: the same requests, before it
        lapses and before the next exploring step."""
        held = self.held
        if held is None or step >= min(held.until, next_explore):
            return False
        same = len(reqs) == len(held.rids) and all(
            req.rid == rid for req, rid in zip(reqs, held.rids, strict=True)
        )
        if not same:
            return False
        self.used += 1
        return True
