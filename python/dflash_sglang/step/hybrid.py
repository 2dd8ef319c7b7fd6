"""Hybrid targets (Qwen3.5/3.6: Gated DeltaNet linear attention + full attention): the
recurrent-state commit after verify.

A linear-attention layer keeps one recurrent state (conv window + SSM state) per request instead
of KV, so a rejected draft cannot simply be left beyond `seq_lens`: it must never reach the state.
In TARGET_VERIFY mode SGLang's hybrid backend runs the block with the live state frozen and keeps
the state after every block position. Commit then copies, per request, the state after the last
accepted position (step `accepted - 1`) into the live slot.

With the radix cache, the request also has a track slot: when the committed length crosses a
multiple of the track grid (`--mamba-track-interval`, aligned to pages), the state at that
multiple is copied there too, and the radix cache stores it for prefix reuse. The boundary is
computed from the post-verify length; a boundary from the pre-verify length tracks the wrong step
(SGLang PR #32052). docs/hybrid.md works one example through.

Trees: SGLang's linear-attention backend hands the verify's EAGLE links (first child, next
sibling) to the conv kernel, which derives each node's parent, and the GDN kernel starts each node
from its parent's state, only when its `topk` > 1; DFLASH resolves topk to 1 (tree/switches.py),
so a tree worker sets it on the backend. Row t of the saved states is then node t, and the commit
copies the accepted path's nodes (the verify's `path_rows`) instead of block steps.
"""

from __future__ import annotations

import torch
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.runtime_context import mamba_track_grid

NO_TRACK = -1


def track_steps(pre: torch.Tensor, post: torch.Tensor, accepted: torch.Tensor, grid: int) -> torch.Tensor:
    """Per request, the block step whose state lands on a track boundary, or NO_TRACK.

    Block step i holds the state after token `pre + i`, i.e. of length `pre + i + 1`. The
    boundary is the last multiple of `grid` at or below `post`; it is tracked when the verify
    crossed it (pre and post in different grid cells) and step `boundary - pre - 1` was accepted.
    """
    boundary = post // grid * grid
    step = torch.clamp(boundary - pre - 1, min=0)
    crossed = (pre // grid != post // grid) & (step < accepted.to(step.dtype))
    return torch.where(crossed, step.to(torch.int64), torch.full_like(step, NO_TRACK, dtype=torch.int64))


class RecurrentStateCommit:
    """Copies the accepted step's linear-attention state into the live (and track) slot."""

    def __init__(self, model_runner, trees: bool = False):
        self.model_runner = model_runner
        backend = model_runner.attn_backend
        self.active = mambaish_config(model_runner.model_config) is not None and hasattr(
            backend, "update_mamba_state_after_mtp_verify"
        )
        linear = getattr(backend, "linear_attn_backend", None)
        if self.active and trees and linear is not None:  # any value > 1: it only asks "a tree?"
            linear.topk = max(linear.topk, 2)

    def __call__(self, batch, pre, post, accepted: torch.Tensor, path_rows: torch.Tensor | None = None):
        """`accepted` [bs] tokens committed per request; `path_rows` [bs, >= max accepted] the
        saved-state row of each accepted depth (a tree's path), None for a chain (row = depth)."""
        if not self.active:
            return
        last = accepted.to(torch.int64) - 1
        steps_to_track = None
        if batch.mamba_track_indices is not None:
            steps_to_track = track_steps(pre, post, accepted, mamba_track_grid(batch.tree_cache.page_size))
        if path_rows is not None:
            last = path_rows.gather(1, last.unsqueeze(1)).squeeze(1)
            if steps_to_track is not None:
                on_path = path_rows.gather(1, steps_to_track.clamp_min(0).unsqueeze(1)).squeeze(1)
                steps_to_track = torch.where(steps_to_track >= 0, on_path, steps_to_track)
        self.model_runner.attn_backend.update_mamba_state_after_mtp_verify(
            last_correct_step_indices=last,
            mamba_track_indices=batch.mamba_track_indices,
            mamba_steps_to_track=steps_to_track,
            model=self.model_runner.model,
            req_pool_indices=batch.req_pool_indices[: accepted.shape[0]],
        )
