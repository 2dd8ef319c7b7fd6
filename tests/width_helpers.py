"""Test-only shorthands over the adaptive width's models (python/dflash_sglang/width/)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from dflash_sglang.width.ranking import ranked_widths
from dflash_sglang.width.step_cost import StepCost
from dflash_sglang.width.step_times import key_stats, non_decreasing_levels


def best_width(profiles: Sequence, cost: StepCost, widths: Sequence[int]) -> int:
    """The width of `widths` with the most expected committed tokens per second (ties: smaller).
    A profile gives `expected_tokens_at(widths)`: a chain's AcceptanceProfile, or a tree's
    (width/acceptance_profiles.py)."""
    return ranked_widths(profiles, cost, widths)[0].width


def non_decreasing(table: dict[int, deque]) -> list[tuple[int, float]]:
    """A table of recent step times by key made a non-decreasing curve, as StepTimes makes its
    curves (step_times.non_decreasing_levels over each key's statistics)."""
    return non_decreasing_levels({count: key_stats(recent) for count, recent in table.items()})
