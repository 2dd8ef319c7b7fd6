"""What a request's sampling settings do to the verify logits, in the no-spec server's order.

A no-spec server samples each token from logits adjusted in this order (`ModelRunner.sample`,
then `Sampler._preprocess_logits`): penalties, the grammar's vocabulary mask, `logit_bias`, custom
logit processors, NaN sanitising. Here the same order runs over a block's B positions at once:

    penalties      exact per position, or per tree node along its root path (sampling/penalties.py)
    grammar        position k is masked by the grammar's state after accepting d_1 .. d_k
                   (SGLang's GrammarTree over the chain, as its own DFLASH worker builds it; a
                   tree node after its root path, as for EAGLE trees); the overlap loop's barrier
                   advances the previous step's tokens first
    logit_bias     the same row at every position
    custom         SGLang's `apply_custom_logit_processor` with B rows per request: a processor
                   sees the request as it was before the block (as in SGLang's own workers)

The grammar mask is built on the host, from the drafts, while the target verifies: the drafts'
copy is started before the verify launch (`grammar_tree`), and read after it.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.sampler import apply_custom_logit_processor
from sglang.srt.speculative.spec_utils import GrammarTree, build_grammar_vocab_mask
from sglang.srt.utils.async_probe import sanitize_nan_logits

from ..runtime import host_sync
from .penalties import PenaltyLedger, PenaltyParams


def grammar_tree(batch, block_tokens: torch.Tensor, draft_tree=None) -> GrammarTree | None:
    """Start the drafts' copy to the host for the grammar mask; before the verify launch. A draft
    tree (tree_batch.BatchTree) goes as SGLang's EAGLE trees do: its first-child and next-sibling
    links, so each node's row is masked by the grammar's state after its root path."""
    if not batch.has_grammar:
        return None
    with host_sync.allowed("grammar: the vocabulary mask is built on the host from the drafts"):
        if draft_tree is not None:
            return GrammarTree.from_device(*draft_tree.retrieve_arrays(), draft_tree.tokens)
        return GrammarTree.from_linear_chain(block_tokens)


def adjust_verify_logits(
    logits: torch.Tensor,
    batch,
    block_tokens: torch.Tensor,
    penalties: PenaltyLedger | None,
    grammar: GrammarTree | None,
    grammar_barrier=None,
    draft_tree=None,
) -> None:
    """Adjust [bs * B, V] verify logits in place, as a no-spec server adjusts one row per step."""
    info = batch.sampling_info
    if info is None:
        return
    bs, size = block_tokens.shape
    per_position = logits.view(bs, size, -1)
    params = PenaltyParams.of(batch.reqs, logits.device)
    if params is not None:
        if penalties is None:
            raise RuntimeError("penalised requests reached verify without a prefill through this worker")
        penalties.apply(per_position, batch.req_pool_indices, block_tokens, params, draft_tree)
    if grammar is not None:
        with host_sync.allowed("grammar: the vocabulary mask is built on the host from the drafts"):
            mask = build_grammar_vocab_mask(
                reqs=batch.reqs,
                tree=grammar,
                sampling_info=info,
                device=logits.device,
                barrier=grammar_barrier,
            )
        if mask is not None:
            mask.apply(logits)
    if info.logit_bias is not None:
        per_position.add_(info.logit_bias.to(logits.dtype).unsqueeze(1))
    if info.has_custom_logit_processor:
        apply_custom_logit_processor(logits, info, num_tokens_in_batch=size)
    sanitize_nan_logits(logits, "dflash_sglang verify logits")
