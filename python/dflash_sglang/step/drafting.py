"""Drafting, the first phase of a DFlash decode step (worker.py runs the step).

The block [last verified token, mask x (B-1)] sits at positions seq_len .. seq_len+B-1; one drafter
forward (TARGET_VERIFY mode, non-causal over the target features injected into the draft KV,
`run_drafter`) gives features at the B-1 mask positions, and the drafter's kind, chosen once at
startup (`blocks_for`), turns them into the step's block: a chain of drafts (step/chain_drafts.py:
argmax or sampled, DFlash2's selector, Domino's rollout) cut to the step's width
(runtime/block.py's `narrow`), or a tree of the width's nodes (step/tree_drafting.py). The width
and each request's length come in the step's plan (width/controller.py chooses it), which the
block carries on to the verify.
"""

from __future__ import annotations

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from ..runtime.block import Block, block_kv_plan, draft_slots
from ..runtime.spec_info import host_read_bound
from ..runtime.step_plan import StepPlan
from .chain_drafts import ChainBlocks, chain_drafts_for
from .deferred_context import DeferredContext
from .draft_window import DraftWindow
from .target_head import TargetHead
from .tp_agreement import TpAgreement
from .tree_drafting import TreeBlocks


def host_lengths(batch, state) -> torch.Tensor:
    """The committed lengths on the host (overlap's host lengths lag a step: the reserved ones)."""
    return batch.seq_lens_cpu if batch.seq_lens_cpu is not None else state.nxt_kv_lens_cpu


def blocks_for(model_runner, draft_runner, draft_model, head: TargetHead, tp: TpAgreement, tree, draft_vocab,
               sampled: bool):  # fmt: skip
    """The drafter's kind, once at startup: a tree's block (`tree`: its settings), or a chain's by
    the drafter (Domino, DFlash2, plain; `sampled`: drafts sampled at temperature > 0)."""
    if tree is not None:
        return TreeBlocks(tree, draft_vocab, model_runner, draft_runner)
    vocab = model_runner.model_config.vocab_size
    drafts = chain_drafts_for(draft_model, head, tp, sampled, vocab)
    return ChainBlocks(drafts, model_runner, draft_runner)


class Drafting:
    """The draft phase: one drafter forward over each request's block, and the block its kind
    makes of it (a chain or a tree). What it reads is given here; the draft window's ring is
    allocated with the pools."""

    def __init__(self, model_runner, draft_runner, draft_model, stream, tp: TpAgreement, block_size: int,
                 device, context: DeferredContext, tree=None, draft_vocab=None,
                 sampled: bool = False, window: DraftWindow | None = None):  # fmt: skip
        self.model_runner, self.draft_runner = model_runner, draft_runner
        self.stream = stream  # the drafter's CUDA stream (runtime/streams.py)
        self.block_size, self.device = block_size, device
        self.context = context  # plain steps' injections, written before the drafter reads
        self.head = TargetHead(model_runner)  # the block is embedded with the target's embedding
        # the drafter's kind: what block its features make (a chain by drafter, or a tree)
        self.blocks = blocks_for(
            model_runner, draft_runner, draft_model, self.head, tp, tree, draft_vocab, sampled
        )
        self.mask_token_id = draft_model.config.mask_token_id
        self.block_offsets = torch.arange(block_size, device=device)
        self.draft_block_info = make_draft_block_spec_info(draft_token_num=block_size, device=device)
        self.window = window  # --speculative-draft-window-size: the drafter's ring (step/draft_window.py)

    def __call__(self, batch, plan: StepPlan) -> Block:
        with self.stream.run():
            block = self.draft_block(batch, batch.spec_info, plan)
        return block._replace(plan=plan)

    def draft_block(self, batch, state, plan: StepPlan) -> Block:
        """Draft the whole block (nothing at width 1); the verify takes the first `plan.width`
        positions (or each request its own length: then, with the partial drafter, only the
        requests verifying drafts are drafted, `plan.drafted`)."""
        if plan.width == 1 and self.window is None:
            return self.plain_block(batch, state)
        bs, seq_lens, size = len(batch.seq_lens), batch.seq_lens, self.block_size
        positions = seq_lens.unsqueeze(1) + self.block_offsets  # [bs, B]
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        cache_loc = req_to_token[batch.req_pool_indices.unsqueeze(1), positions].flatten()
        block_ids = torch.full((bs, size), self.mask_token_id, dtype=torch.int64, device=self.device)
        block_ids[:, 0] = state.bonus_tokens
        host_lens = host_lengths(batch, state)
        kv_plan = block_kv_plan(self.model_runner.kv_index_translator, batch, host_lens, cache_loc, size)
        drafted = None if plan.drafted is None else list(plan.drafted)  # (a list indexes rows)
        hidden, draft_loc = self.run_drafter(batch, state, block_ids, positions, cache_loc, kv_plan, drafted)
        block = Block(block_ids, positions.flatten(), cache_loc, kv_plan, draft_loc)  # draft_loc: the ring's
        return self.blocks(batch, plan, state.bonus_tokens, block, hidden, host_lens)

    def plain_block(self, batch, state) -> Block:
        """A plain step's block (width 1 for the whole batch): the verified token alone at each
        committed length, its features injected at its slot; no drafter forward, and in as few
        ops as the block allows (a plain step should cost SGLang's decode step, issue 64)."""
        bs, seq_lens = len(batch.seq_lens), batch.seq_lens
        positions = seq_lens.to(torch.int64, copy=True)  # held by the deferred context: not a view
        cache_loc = self.model_runner.req_to_token_pool.req_to_token[batch.req_pool_indices, seq_lens]
        translator = self.model_runner.kv_index_translator
        kv_plan = block_kv_plan(translator, batch, host_lengths(batch, state), cache_loc, 1)
        draft_loc = draft_slots(kv_plan, self.draft_runner.kv_index_translator, bs, 1)
        tokens = state.bonus_tokens.to(torch.int64, copy=True).view(bs, 1)
        return Block(tokens, positions, cache_loc, kv_plan, draft_loc)

    def run_drafter(self, batch, state, block_ids, positions, cache_loc, kv_plan, drafted=None):
        """One drafter forward over [verified token, mask x (B-1)], non-causal over the injected
        context: the block's features [bs, B, H] (zeros in the rows of requests not drafted, where
        `drafted` lists the drafted ones), and its slots in the drafter's ring when there is one."""
        bs, size = block_ids.shape
        self.context.flush()  # the context the plain steps since the last draft committed
        bound_cpu = host_read_bound(batch, state, size)
        req_pool_indices, seq_lens = batch.req_pool_indices, batch.seq_lens
        if drafted is not None:  # only the requests that verify drafts
            index = torch.tensor(drafted, device=self.device)
            req_pool_indices, seq_lens = req_pool_indices[index], seq_lens[index]
            bound_cpu, host_lens = bound_cpu[drafted], kv_plan.seq_lens_cpu[drafted]
            block_ids, positions = block_ids[index], positions[index]
            cache_loc = cache_loc.view(bs, size)[index].flatten()
            kv_plan = self.model_runner.kv_index_translator.plan(
                req_pool_indices=req_pool_indices, seq_lens=seq_lens, seq_lens_cpu=host_lens,
                write_virtual=cache_loc, read_extent=size,
            )  # fmt: skip
        draft_lens, draft_loc, draft_plan = seq_lens, None, kv_plan
        if self.window is not None:  # the drafter reads its own short rows (step/draft_window.py)
            draft_lens = self.window.visible_lens(req_pool_indices, seq_lens)
            self.window.write_rows(
                self.draft_runner.req_to_token_pool.req_to_token, req_pool_indices, seq_lens, draft_lens
            )
            draft_loc = self.window.slots(req_pool_indices, positions)
            bound_cpu = torch.clamp(bound_cpu, max=self.window.window)
            draft_plan = self.draft_runner.kv_index_translator.plan(
                req_pool_indices=req_pool_indices,
                seq_lens=draft_lens,
                seq_lens_cpu=bound_cpu,
                write_virtual=draft_loc.flatten(),
                read_extent=size,
            )
        count = block_ids.shape[0]  # the requests drafted
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=count,
            input_ids=block_ids.flatten(),
            req_pool_indices=req_pool_indices,
            seq_lens=draft_lens,
            out_cache_loc=cache_loc if draft_loc is None else draft_loc.flatten(),
            seq_lens_sum=int(bound_cpu.sum()),
            seq_lens_cpu=bound_cpu,
            positions=positions.flatten(),
            input_embeds=self.head.embed(block_ids).flatten(0, 1),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self.draft_block_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            global_num_token_non_padded_cpu=count * size,
            can_run_decode_cuda_graph=False,
        )
        draft_plan.bind(forward_batch, self.draft_runner.kv_index_translator)
        with torch.inference_mode():
            hidden = self.draft_runner.forward(forward_batch).logits_output.hidden_states
        if drafted is None:
            return hidden.view(bs, size, -1), draft_loc
        full = hidden.new_zeros((bs, size, hidden.shape[-1]))  # never verified: their length is 1
        full[index] = hidden.view(count, size, -1)
        return full, draft_loc
