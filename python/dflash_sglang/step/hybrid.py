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

ReplaySSM (`--enable-linear-replayssm-spec`; a tree's verify and commit are tree/replay_ring.py's):
the verify keeps no state per block position. SGLang's verify kernel reads the request's
checkpoint and writes each position's update vector, key and decay to a small ring per request row;
the commit is SGLang's own
`commit_mamba_states_after_verify` (as its EAGLE workers call it): advance the ring's cursors by
the accepted count, fold the accepted records into the checkpoint (and the tracked step's into the
track slot), roll the conv window back. Its `draft_token_num` sets when a fold happens (once
`write_pos + 2 * draft_token_num` passes the ring's length L); we pass L, so every commit folds and
the checkpoint is the committed state after every step: a plain step's verify, a finished request's
state donated to the radix cache, and a PD transfer all read a current state.
"""

from __future__ import annotations

import torch
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.runtime_context import mamba_track_grid

from ..errors import DFlashConfigError
from ..tree.replay_ring import commit_tree_through_the_ring
from . import recurrent_memory
from .replay_choice import scratch_words

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


def replay_ring_length(model_runner) -> int | None:
    """L of the ReplaySSM ring this target's pool holds, or None (per-position snapshots)."""
    pool = getattr(model_runner.req_to_token_pool, "mamba_pool", None)
    if pool is None or getattr(pool, "replayssm_cache_base", None) is None:
        return None
    return int(pool.mamba_cache.replayssm_d.shape[-2])


def refuse_what_the_ring_cannot_verify(ring_length: int, widest: int) -> None:
    if ring_length < widest:
        raise DFlashConfigError(
            f"--linear-replayssm-cache-len {ring_length} is shorter than the widest DFLASH verify "
            f"({widest} tokens): the ring holds one verify's records; set it to a power of two >= {widest}"
        )


class RecurrentStateCommit:
    """Lands the accepted step's linear-attention state in the live (and track) slot. Built at
    startup, inactive until `bind`: the target's pools and backends come later."""

    def __init__(self, target_worker, widest: int, trees: bool = False):
        self.target_worker, self.widest, self.trees = target_worker, widest, trees
        model_runner = self.model_runner = target_worker.model_runner
        self.hybrid = mambaish_config(model_runner.model_config) is not None
        self.active = False  # a hybrid target's, once bound
        self.ring_length = None  # ReplaySSM's ring, once the pools exist
        self.memory = None  # what a request's recurrent state costs (step/recurrent_memory.py)

    def bind(self) -> None:
        """Once the target's attention backends exist (the pools before them): whether this target
        commits a recurrent state, and how (per-position snapshots or ReplaySSM's ring)."""
        model_runner, widest, trees = self.model_runner, self.widest, self.trees
        backend = model_runner.attn_backend
        self.active = self.hybrid and hasattr(backend, "update_mamba_state_after_mtp_verify")
        if not self.active:
            return
        self.ring_length = replay_ring_length(model_runner)
        if self.ring_length is not None:
            refuse_what_the_ring_cannot_verify(self.ring_length, widest)
        hf_config = model_runner.model_config.hf_config
        words = scratch_words(self.ring_length is not None, trees, model_runner.server_args, hf_config)
        self.memory = recurrent_memory.report(
            model_runner, self.ring_length is not None, words, widest, trees
        )
        linear = getattr(backend, "linear_attn_backend", None)
        if trees and linear is not None:  # any value > 1: it only asks "a tree?"
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
        if self.ring_length is not None and path_rows is None:
            self.replay(batch, accepted, last, steps_to_track)
            return
        depth_to_track = steps_to_track
        if path_rows is not None:
            last = path_rows.gather(1, last.unsqueeze(1)).squeeze(1)
            if steps_to_track is not None:
                on_path = path_rows.gather(1, steps_to_track.clamp_min(0).unsqueeze(1)).squeeze(1)
                steps_to_track = torch.where(steps_to_track >= 0, on_path, steps_to_track)
        if self.ring_length is not None:  # a tree through the ring: depths for the fold, nodes for conv
            track = None if steps_to_track is None else (depth_to_track, steps_to_track)
            commit_tree_through_the_ring(self.target_worker, batch, accepted, path_rows, last, track)
            return
        self.model_runner.attn_backend.update_mamba_state_after_mtp_verify(
            last_correct_step_indices=last,
            mamba_track_indices=batch.mamba_track_indices,
            mamba_steps_to_track=steps_to_track,
            model=self.model_runner.model,
            req_pool_indices=batch.req_pool_indices[: accepted.shape[0]],
        )

    def replay(self, batch, accepted, last, steps_to_track):
        """SGLang's ReplaySSM commit, folding every step (the module's docstring says why)."""
        from sglang.srt.speculative.spec_utils import commit_mamba_states_after_verify

        lengths = accepted.to(torch.int32)
        commit_mamba_states_after_verify(
            self.target_worker,
            batch,
            accept_lens=lengths,
            accept_index=lengths.unsqueeze(1),  # read only for "anything accepted?": we pass the steps
            draft_token_num=self.ring_length,
            prepared_step_indices=(last, steps_to_track),
        )
