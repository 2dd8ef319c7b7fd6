"""One decode step's plan: what the width policy (width/controller.py) decided the step verifies.

`VerifyWidth.choose` returns it; the block carries it from drafting to verifying (runtime/block.py),
and the worker hands it back to the policy with what the verify learned (`VerifyWidth.step_done`).
A value: no phase reads the policy's attributes mid-step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepPlan:
    width: int  # positions a request verifies (a tree's nodes); the longest where lengths differ
    widest: bool  # the server's widest width: the only one whose uniform chain verify runs graphs
    lengths: tuple[int, ...] | None = None  # each request's own verify length; None: `width` for all
    tree: bool = False  # a tree server: the width counts nodes, a budget of width - 1 drafts
    # The requests a ragged step drafts for, with the partial drafter (those of length > 1);
    # None: every request.
    drafted: tuple[int, ...] | None = None

    @property
    def budget(self) -> int | None:
        """A tree's drafts beyond its root (None for a chain)."""
        return self.width - 1 if self.tree else None
