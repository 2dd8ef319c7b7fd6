"""A chain block verified at per-request lengths, packed into one ragged target forward.

The draft phase builds a [bs, w] block (w the longest request's length, width/request_lengths.py).
Request i verifies only its first L_i positions: the verify forward takes those sum_i L_i tokens
(SGLang's `RaggedVerifyLayout` on the verify input, as its DSPARK worker builds it; the CPU
attention reads its lengths, cpu/kernels/attention.py), and its logits and captured hidden states are
scattered back to the block's [bs * w] rows, so the acceptance, the request outputs and the commit
keep their one stride. The rows past a request's length hold zeros and are never read: its
acceptance stops at L_i - 1 drafts (`cap_drafts`, sampled_verify's `draft_counts`; block
verification judges a block of L_i - 1 drafts), so it commits at most L_i tokens, and the
commit's injection writes only committed positions.

Why it is exact: verifying the first L_i positions is the whole-block verify of a block of L_i,
which is exact at every L_i (the width's argument, docs/adaptive.md), request by request.

Trees too, on CPU: request i verifies its tree's first L_i nodes (a smaller budget's tree, since
best-first trees nest: tree/budgets.py), with their n_i x n_i ancestor mask (tree/verify.attach),
and walks only them (BatchTree.truncated). Hybrid (Gated DeltaNet) targets too, on CPU with
SGLang's ReplaySSM ring (the default for their chains): the ring verify is varlen and keeps no state per
block position, and cpu/gated_deltanet/ragged_verify.py runs each request's own length through the conv
update. What takes one width a batch (ragged_off_because): a hybrid target's state per block
position, SGLang's GPU ring kernels, a GPU backend's tree mask, attention DP.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

from ..runtime.block import Block, block_kv_plan


class RaggedRows(NamedTuple):
    """Which of the block's [bs * w] rows the ragged forward computes, and their lengths."""

    keep: torch.Tensor  # [sum L_i] flat row ids of the block, request by request
    lengths: torch.Tensor  # [bs] int64 on the device: each request's verify length
    lengths_cpu: tuple[int, ...]
    width: int


def ragged_rows(lengths_cpu: tuple[int, ...], width: int, device) -> RaggedRows:
    lengths = torch.tensor(lengths_cpu, dtype=torch.int64)
    columns = torch.arange(width).expand(len(lengths_cpu), width)
    keep = (columns + width * torch.arange(len(lengths_cpu)).unsqueeze(1))[columns < lengths.unsqueeze(1)]
    return RaggedRows(keep.to(device), lengths.to(device), lengths_cpu, width)


def ragged_block(block: Block, rows: RaggedRows, batch, translator) -> Block:
    """The block's kept positions (tokens flat), with their own KV plan: each request writes the
    block's first L_i slots, and its reads stay within the block's."""
    cache_loc = block.cache_loc[rows.keep]
    kv_plan = block_kv_plan(translator, batch, block.kv_plan.seq_lens_cpu, cache_loc, rows.width)
    return block._replace(
        tokens=block.tokens.flatten()[rows.keep], positions=block.positions[rows.keep],
        cache_loc=cache_loc, kv_plan=kv_plan,
    )  # fmt: skip


def layout(rows: RaggedRows, device) -> RaggedVerifyLayout:
    """SGLang's ragged verify layout of the step (its attention backends read it)."""
    return RaggedVerifyLayout.from_verify_lens(
        verify_lens_cpu=rows.lengths_cpu, device=device, grid=[sum(rows.lengths_cpu)]
    )


def scatter_back(values: torch.Tensor | None, rows: RaggedRows) -> torch.Tensor | None:
    """[sum L_i, ...] rows of the ragged forward -> the block's [bs * w, ...], zeros elsewhere."""
    if values is None:
        return None
    full = values.new_zeros((len(rows.lengths_cpu) * rows.width, *values.shape[1:]))
    full[rows.keep] = values
    return full


def cap_drafts(drafts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Greedy acceptance within each request's length: drafts past L_i - 1 can never match."""
    position = torch.arange(drafts.shape[1], device=drafts.device)
    return torch.where(position < (lengths - 1).unsqueeze(1), drafts, torch.full_like(drafts, -1))


def ragged_off_because(model_runner, tree, simulated) -> str | None:
    """Why this server verifies one width a batch (None: it can verify per-request lengths)."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    from ..runtime import dp_attention

    if mambaish_config(model_runner.model_config) is not None:
        hybrid = hybrid_off_because(model_runner)
        if hybrid is not None:
            return hybrid
    if tree is not None and str(model_runner.device) != "cpu":  # the CPU hook splits ragged masks
        return "a GPU backend's tree mask (FULL_MASK) takes one node count a batch"
    if simulated is not None:
        return "simulated acceptance draws one width a batch"
    if dp_attention.enabled():
        return "DP ranks verify whole blocks"
    return None


def hybrid_off_because(model_runner) -> str | None:
    """A hybrid (Gated DeltaNet) target verifies per-request lengths only through SGLang's
    ReplaySSM ring on a cpu server (cpu/gated_deltanet/ragged_verify.py runs each request's own length through
    the conv update; the ring verify is varlen and keeps no state per block position)."""
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    # The worker is built before the pools (so no `replay_ring_length` yet): the flag that builds
    # the ring (admission/replay_ssm.py) on a GDN target. cpu/gated_deltanet/ragged_verify.py refuses a ragged
    # verify that reaches a pool without the ring.
    if not replay_ring_asked_for() or hybrid_gdn_config(model_runner.model_config) is None:
        return "a hybrid target's state per block position takes one width a batch"
    if str(model_runner.device) != "cpu":
        return "SGLang 0.5.23's GDN ring kernels take no ragged layout"
    return None


def replay_ring_asked_for() -> bool:
    """`--enable-linear-replayssm-spec` (given, or declared by DFLASH_SGLANG_REPLAY_SSM=1)."""
    from sglang.srt.runtime_context import get_exec

    return bool(get_exec().mamba.enable_linear_replayssm_spec)
