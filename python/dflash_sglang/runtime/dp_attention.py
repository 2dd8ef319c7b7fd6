"""Our step under attention DP (`--enable-dp-attention --dp-size N`).

Each DP rank runs its own batch through attention; the MLP (and the LM head unless
`--enable-dp-lm-head`) gathers all DP ranks' tokens in collectives across the whole TP group. So
every rank must run every target forward, in step, even one with no requests this round: SGLang
then hands the worker an IDLE batch, and an idle rank runs the target verify forward in IDLE mode
(no tokens, the collectives only), as SGLang's own DFLASH worker does. The drafter needs no such
care: SGLang builds it under the narrowed draft TP scope (the attention-TP group), so its forward
has no cross-DP collective, and an idle rank skips it.

On an active rank the verify forward's attention metadata is planned by the model runner after
the DP padding (`defer_metadata_init`), and runs eager when a peer is idle or prefilling this
round: their token counts do not match a padded CUDA-graph bucket.
"""

from __future__ import annotations

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.dflash_info import DFlashVerifyInput


def enabled() -> bool:
    return get_parallel().attn_dp_enabled


def run_idle_verify(batch, target_worker, block_size: int, device) -> None:
    """An idle DP rank's share of this round's verify collectives."""
    empty = torch.empty((0,), dtype=torch.int64, device=device)
    idle_input = DFlashVerifyInput(
        draft_token=empty,
        positions=empty,
        draft_token_num=block_size,
        custom_mask=None,
        capture_hidden_mode=CaptureHiddenMode.FULL,
    )
    forward_batch, _ = idle_input.prepare_for_verify(batch, target_worker, defer_metadata_init=True)
    forward_batch.can_run_decode_cuda_graph = False  # the active ranks run eager too (below)
    target_worker.forward_batch_generation(batch=None, forward_batch=forward_batch, is_verify=True)


def run_eager_if_peers_differ(forward_batch, batch) -> None:
    """A peer that is idle or prefilling contributes raw token counts to the DP gather, which a
    graph replaying the padded bucket would disagree with."""
    counts = forward_batch.original_global_num_tokens_cpu
    if (counts is not None and min(counts) == 0) or batch.is_extend_in_batch:
        forward_batch.can_run_decode_cuda_graph = False
