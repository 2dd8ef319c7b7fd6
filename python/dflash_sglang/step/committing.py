"""Committing, the third phase of a DFlash decode step (worker.py runs the step).

Publish the new lengths (`on_publish`: the overlap scheduler may plan the next step from there),
land a hybrid target's recurrent state first (step/hybrid.py), inject the committed positions'
target features into the draft KV pool (held over plain steps: step/deferred_context.py), count
the penalties' new tokens, attach what the scheduler reads besides tokens
(step/request_outputs.py), and hand the bonus token to the next step.
"""

from __future__ import annotations

import torch
from sglang.srt.managers.utils import GenerationBatchResult

from ..runtime.block import Block
from ..runtime.spec_info import DFlashDraftState
from ..sampling.penalties import PenaltyLedger
from .deferred_context import DeferredContext
from .hybrid import RecurrentStateCommit
from .request_outputs import attach_request_outputs
from .verifying import Verified


class Committing:
    """The commit phase: what a verified block leaves behind, for the scheduler and the drafter."""

    def __init__(self, context: DeferredContext, recurrent_state: RecurrentStateCommit):
        self.context = context  # the draft KV's injection, held over plain steps
        self.recurrent_state = recurrent_state  # a hybrid target's (step/hybrid.py), bound with the backends

    def __call__(self, batch, block: Block, verified: Verified, penalties: PenaltyLedger | None, on_publish):
        target_out, accepted = verified.target_out, verified.accepted
        lengths = accepted.lengths.to(torch.int32)
        new_seq_lens = batch.seq_lens + lengths.to(batch.seq_lens.dtype)
        # Hybrid targets: the accepted state lands before the publish event, as in SGLang's own
        # workers, so nothing the scheduler orders after that event sees a stale state.
        self.recurrent_state(batch, batch.seq_lens, new_seq_lens, lengths, verified.path_rows)
        if on_publish is not None:
            on_publish(new_seq_lens)  # the scheduler may plan the next step from here on
        bonus = accepted.tokens.gather(1, (accepted.lengths - 1).unsqueeze(1)).squeeze(1)
        # The verified token and the accepted drafts now have target features: inject them (a
        # plain step's wait for the drafter's next forward, step/deferred_context.py).
        logits_output = target_out.logits_output
        plain, graph = block.tokens.shape[1] == 1, bool(target_out.can_run_cuda_graph)
        hidden = logits_output.hidden_states
        self.context.inject(hidden, block.positions, block.draft_loc, lengths, plain, graph)
        logits_output.hidden_states = None
        if penalties is not None:
            penalties.commit(batch.req_pool_indices, accepted.tokens, lengths)
        width = block.tokens.shape[1]
        attach_request_outputs(batch, logits_output, accepted.tokens, lengths, width)
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=accepted.tokens.flatten(),
            accept_lens=lengths,
            can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=DFlashDraftState.create(bonus, new_seq_lens),
            speculative_num_draft_tokens=width,  # the row stride of next_token_ids
            new_seq_lens=new_seq_lens,
            routed_experts_output=target_out.routed_experts_output,
            indexer_topk_output=target_out.indexer_topk_output,
        )
