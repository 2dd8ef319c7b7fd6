"""A plain step's target forward as SGLang's own decode step.

A step that verifies no draft (the plan's width 1 for the whole batch) has one token a request: the
verified token at the committed length. A no-spec server runs that token through a DECODE forward;
a TARGET_VERIFY forward of width 1 runs the same token through the extend path (per-request query
lengths, the verify's attention planning, the KV plan of a block), which on the tiny pair's CPU
profile cost about 6% more than the decode forward (docs/benchmarks.md, "A plain step against
no-spec's"). So a plain step hands the target the batch as SGLang's `prepare_for_decode` would:
DECODE mode, the verified tokens as input, the KV lengths one past the committed ones, the slot
SGLang reserved at the committed length as the write. The layers' hidden states are captured as a
verify's are (the drafter's context: step/deferred_context.py holds them), and the token is drawn
by SGLang's sampler from the adjusted logits as before (sampling/plain_draw.py).

Where a decode forward cannot stand in for the verify, the verify runs (`decode_off_because`):
- a hybrid target: its decode forward advances the recurrent state in place, where the commit
  (step/hybrid.py) lands the accepted position's state from the verify's scratch;
- data-parallel attention: the peers run the verify's collectives (runtime/dp_attention.py);
- a draft tree server: its recurrent layers read the tree's links even at width 1
  (tree/verify.py's attach_chain_links), and its attention backend is planned for trees;
- a target with captured graphs (CUDA graphs, CPU graphs): the server captured verify graphs of
  the block's width, and SGLang's runner would replay one for a decode batch of a size it holds.
  So on GPUs, untested here, plain steps keep the verify (eager at width 1, as before).
"""

from __future__ import annotations

from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

from ..runtime.block import Block
from ..runtime.spec_info import host_read_bound


def decode_off_because(model_runner, tree, dp_attention: bool) -> str | None:
    """Why a plain step keeps the verify forward on this server, or None (it runs a decode)."""
    if mambaish_config(model_runner.model_config) is not None:
        return "a hybrid target (the recurrent state lands from the verify's scratch)"
    if dp_attention:
        return "data-parallel attention (the peers run the verify's collectives)"
    if tree is not None:
        return "a draft tree server (its backends are planned for trees)"
    if model_runner.decode_cuda_graph_runner is not None:
        return "captured verify graphs (a decode batch would replay one)"
    return None


def decode_forward(target_worker, batch, block: Block):
    """The target's DECODE forward over each request's verified token (block.tokens [bs, 1]),
    hidden states captured; `batch` is left as it came (lengths, mode, state)."""
    committed = (batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum)
    kept = (batch.forward_mode, batch.input_ids, batch.spec_info)
    batch.forward_mode, batch.input_ids, batch.spec_info = ForwardMode.DECODE, block.tokens.flatten(), None
    batch.out_cache_loc = block.cache_loc  # the slot SGLang reserved at each committed length
    # The KV a decode reads: the committed prefix and the token (on the host, overlap's bound).
    batch.seq_lens_cpu = host_read_bound(batch, kept[2], 1).to(batch.seq_lens.dtype)
    batch.seq_lens, batch.seq_lens_sum = batch.seq_lens + 1, int(batch.seq_lens_cpu.sum())
    try:
        model_runner = target_worker.model_runner
        forward_batch = ForwardBatch.init_new(
            batch,
            model_runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
    finally:
        batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum = committed
        batch.forward_mode, batch.input_ids, batch.spec_info = kept
    return target_worker.forward_batch_generation(batch=None, forward_batch=forward_batch, is_verify=True)
