"""Startup rehearsal of sampled verification at its worst case.

SGLang calls the speculative worker's `prewarm_sampling()` once at startup, after graph capture
and before the post-capture KV sizing; with graph-pool borrowing off, that sizing leaves the
returned `sampling_headroom_bytes` free. Our verify temporaries (sampled_verify, target_law) and
the draw's (sampled_drafts) are ordinary allocations, so the rehearsal measures their peak at the
largest batch with every filter on (the sort pass is the largest), and turns borrowing off so
that the headroom is what counts. Under block verification the verify rehearsed is the block one
with a proposal: it holds q's logits at every draft position ([bs * (B-1), V] float32, one
LM-head product, `DraftProposal.every_row`) while it runs.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch

from .sampled_drafts import draw_drafts
from .sampled_verify import sampled_accept

logger = logging.getLogger(__name__)

TOP_K_ALL = 1 << 30  # SGLang's "no top-k" (sglang.srt.sampling.sampling_params.TOP_K_ALL)


def worst_case_info(bs: int, device) -> SimpleNamespace:
    """Every filter on, no top-k bound: the full-vocabulary sort pass runs on every row."""
    return SimpleNamespace(
        temperatures=torch.ones((bs, 1), dtype=torch.float32, device=device),
        top_ks=torch.full((bs,), TOP_K_ALL, dtype=torch.int32, device=device),
        top_ps=torch.full((bs,), 0.95, dtype=torch.float32, device=device),
        min_ps=torch.full((bs,), 0.05, dtype=torch.float32, device=device),
        is_all_greedy=False,
        need_top_k_sampling=False,
        need_top_p_sampling=True,
        need_min_p_sampling=True,
        max_top_k=None,
    )


def rehearse(bs: int, block_size: int, vocab: int, device, draws: bool = False, block: bool = False) -> int:
    """Run one worst-case sampled verify (and, with `draws`, one worst-case draw of sampled
    drafts; with `block` too, the block verification of such drafts); on CUDA return their peak
    bytes above what was allocated before (the logits themselves excluded): the larger verify's
    plus the draw's, since the draw runs on the drafter stream and may overlap a verify.
    Elsewhere 0 (nothing to measure, the run still proves the path at full size)."""
    device = torch.device(device)
    logits = torch.zeros((bs * block_size, vocab), dtype=torch.float32, device=device)
    drafts = torch.zeros((bs, block_size - 1), dtype=torch.int64, device=device)
    info = worst_case_info(bs, device)
    verifies = [lambda: sampled_accept(drafts, logits, info, block_size)]
    draw_peak = 0
    if draws:  # the LM head stands in as a zero [rows, V] output: its chunk is the draw's input
        features = torch.zeros((bs, block_size - 1, 1), device=device)
        head = lambda rows: torch.zeros((rows.shape[0], vocab), dtype=torch.float32, device=device)  # noqa: E731
        draw_peak = peak_bytes(lambda: draw_drafts(features, head, info, vocab), device)
        if block:  # q's logits at every draft position, alive during the verify
            proposal = draw_drafts(features, head, info, vocab)[1]
            verifies.append(
                lambda: sampled_accept(
                    drafts, logits, info, block_size, proposal=proposal, block_verification=True
                )
            )
    return max(peak_bytes(run, device) for run in verifies) + draw_peak


def peak_bytes(run, device) -> int:
    if device.type != "cuda":
        run()
        return 0
    run()  # cached workspaces land outside the peak
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    run()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def prewarm_sampled_verify(model_runner, block_size: int, draws: bool = False):
    """DFlashWorker.prewarm_sampling: rehearse, record the headroom where SGLang's KV sizing reads
    it, and return SGLang's SamplingPrewarmResult."""
    from sglang.srt.model_executor.model_runner import SamplingPrewarmResult
    from sglang.srt.model_executor.runner_utils import pool
    from sglang.srt.runtime_context import get_spec

    # A verify batch never holds more requests than the scheduler runs at once.
    bs = model_runner.max_running_requests or model_runner.max_decode_logits_rows() // block_size
    vocab = model_runner.model_config.vocab_size
    # Block verification applies to sampled drafts only (block_verify.block_verification_for).
    block = draws and bool(getattr(get_spec(), "speculative_use_block_verification", False))
    peak = rehearse(max(1, int(bs)), block_size, vocab, model_runner.device, draws, block)
    if pool.graph_pool_borrow_enabled():
        # Borrowing would have the KV sizing skip our headroom, and we do not allocate from it.
        pool.disable_graph_pool_borrow("dflash_sglang's sampled verify reserves its rehearsed peak instead")
    inputs = int(bs) * block_size * vocab * 4
    result = SamplingPrewarmResult(sampling_input_bytes=inputs, sampling_headroom_bytes=peak + inputs)
    model_runner.sampling_prewarm_result = result
    logger.info(
        "dflash_sglang: sampled verify%s rehearsed at %d requests x block %d x vocab %d: peak %.1f MiB",
        (" (as a block) and draw" if block else " and draw") if draws else "", bs, block_size, vocab,
        peak / (1 << 20),
    )  # fmt: skip
    return result
