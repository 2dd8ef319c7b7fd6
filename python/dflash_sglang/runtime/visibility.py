"""Which keys a drafter block's queries may see: shared by the drafter's own attention
(drafter/model.py) and the CPU layer's TARGET_VERIFY / draft attention (cpu/kernels/attention.py),
so both folders read one mask from below them. Plain torch: engine-free."""

from __future__ import annotations

import torch


def block_visibility(
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    window: int | None,
    causal: bool,
) -> torch.Tensor:
    """[b, q, k] boolean mask: which keys each block query may attend to.

    Full-attention layers: everything (context and the whole block). Sliding layers: keys within
    `window` positions, and only earlier or equal positions when causal.
    """
    delta = query_positions.unsqueeze(-1) - key_positions.unsqueeze(-2)
    visible = torch.ones_like(delta, dtype=torch.bool)
    if causal:
        visible &= delta >= 0
    if window is not None:
        visible &= delta < window
        if not causal:
            visible &= delta > -window
    return visible
