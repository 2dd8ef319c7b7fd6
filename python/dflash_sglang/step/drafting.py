"""Drafting, the first phase of a DFlash decode step (worker.py runs the step).

The block [last verified token, mask x (B-1)] sits at positions seq_len .. seq_len+B-1; one drafter
forward (TARGET_VERIFY mode, non-causal over the target features injected into the draft KV) gives
features at the B-1 mask positions, and the target's LM head turns them into the drafts: their
argmax chain, or a tree of the most probable prefixes (tree/verify.py). The verify then reads the
block's first `width` positions (width/controller.py chooses it, runtime/block.py's `narrow` cuts
the block) or the tree's N nodes.
"""

from __future__ import annotations

import functools

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.draft_worker_common import make_draft_block_spec_info
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from ..drafter.domino import domino_block_drafts
from ..drafter.sampled_walk import sampled_walk
from ..drafter.selector import walk_candidates
from ..runtime.block import Block, block_kv_plan, narrow
from ..runtime.spec_info import host_read_bound
from ..runtime.step_plan import StepPlan
from ..sampling.distribution import vocab_parallel_argmax, vocab_parallel_logits, vocab_parallel_topk
from ..sampling.sampled_drafts import draw_drafts
from ..sampling.target_law import is_greedy
from ..tree import verify as tree_verify
from .deferred_context import DeferredContext
from .draft_window import DraftWindow
from .tp_agreement import TpAgreement


class Drafting:
    """The draft phase: one drafter forward over each request's block, and its drafts (a chain, or a
    tree of N nodes). What it reads is given here; the draft window's ring is allocated with the pools."""

    def __init__(self, model_runner, draft_runner, draft_model, stream, tp: TpAgreement, block_size: int,
                 device, context: DeferredContext, tree=None, draft_vocab=None,
                 sampled_drafts: bool = False, window: DraftWindow | None = None):  # fmt: skip
        self.model_runner, self.draft_runner, self.draft_model = model_runner, draft_runner, draft_model
        self.stream = stream  # the drafter's CUDA stream (runtime/streams.py)
        self.tp = tp  # sampled drafts: every TP rank verifies rank 0's draws
        self.block_size, self.device = block_size, device
        self.context = context  # plain steps' injections, written before the drafter reads
        self.tree, self.draft_vocab = tree, draft_vocab  # tree settings, the drafter's log q
        self.sampled_drafts = sampled_drafts  # at T > 0 (sampling/sampled_drafts.py)
        self.mask_token_id = draft_model.config.mask_token_id
        self.block_offsets = torch.arange(block_size, device=device)
        self.draft_block_info = make_draft_block_spec_info(draft_token_num=block_size, device=device)
        self.window = window  # --speculative-draft-window-size: the drafter's ring (step/draft_window.py)

    def __call__(self, batch, plan: StepPlan) -> Block:
        with self.stream.run():
            block = self.draft_on_drafter_stream(batch, batch.spec_info, plan.width, plan.drafted)
        return block._replace(plan=plan)

    def draft_on_drafter_stream(self, batch, state, width: int, drafted=None) -> Block:
        """Draft the whole block (nothing at width 1); the verify takes the first `width` positions
        (or each request its own length: then, with the partial drafter, only the requests
        verifying drafts are drafted, `drafted`)."""
        bs, seq_lens = len(batch.seq_lens), batch.seq_lens
        size = self.block_size if width > 1 or self.window is not None else 1
        positions = seq_lens.unsqueeze(1) + self.block_offsets[:size]  # [bs, size]
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        cache_loc = req_to_token[batch.req_pool_indices.unsqueeze(1), positions].flatten()
        block_ids = torch.full((bs, size), self.mask_token_id, dtype=torch.int64, device=self.device)
        block_ids[:, 0] = state.bonus_tokens
        host_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else state.nxt_kv_lens_cpu
        kv_plan = block_kv_plan(self.model_runner.kv_index_translator, batch, host_lens, cache_loc, size)
        draft_loc, proposal = None, None  # the injected KV's slots (the target's, or the ring's); q
        if size > 1:
            rows = None if drafted is None else list(drafted)  # (a list indexes rows)
            hidden, draft_loc = self.run_drafter(batch, state, block_ids, positions, cache_loc, kv_plan, rows)
            if self.tree is not None:
                return self.tree_block(batch, state.bonus_tokens, hidden[:, 1:], host_lens, width)
            block_ids[:, 1:], proposal = self.chain_drafts(hidden, state.bonus_tokens, batch)
        if draft_loc is None:
            draft_loc = kv_plan.write_ids(self.draft_runner.kv_index_translator).view(bs, size)
        block = Block(block_ids, positions.flatten(), cache_loc, kv_plan, draft_loc, proposal=proposal)
        return narrow(block, width, batch, self.model_runner.kv_index_translator, host_lens)

    def run_drafter(self, batch, state, block_ids, positions, cache_loc, kv_plan, rows=None):
        """One drafter forward over [verified token, mask x (B-1)], non-causal over the injected
        context: the block's features [bs, B, H] (zeros in the rows of requests not drafted, where
        `rows` names the drafted ones), and its slots in the drafter's ring when there is one."""
        bs, size = block_ids.shape
        self.context.flush()  # the context the plain steps since the last draft committed
        bound_cpu = host_read_bound(batch, state, size)
        req_pool_indices, seq_lens = batch.req_pool_indices, batch.seq_lens
        if rows is not None:  # only the requests that verify drafts
            index = torch.tensor(rows, device=self.device)
            req_pool_indices, seq_lens, bound_cpu = req_pool_indices[index], seq_lens[index], bound_cpu[rows]
            block_ids, positions = block_ids[index], positions[index]
            cache_loc = cache_loc.view(bs, size)[index].flatten()
            kv_plan = self.model_runner.kv_index_translator.plan(
                req_pool_indices=req_pool_indices, seq_lens=seq_lens, seq_lens_cpu=kv_plan.seq_lens_cpu[rows],
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
        drafted = block_ids.shape[0]
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=drafted,
            input_ids=block_ids.flatten(),
            req_pool_indices=req_pool_indices,
            seq_lens=draft_lens,
            out_cache_loc=cache_loc if draft_loc is None else draft_loc.flatten(),
            seq_lens_sum=int(bound_cpu.sum()),
            seq_lens_cpu=bound_cpu,
            positions=positions.flatten(),
            input_embeds=self.target_embedding(block_ids).flatten(0, 1),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self.draft_block_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            global_num_token_non_padded_cpu=drafted * size,
            can_run_decode_cuda_graph=False,
        )
        draft_plan.bind(forward_batch, self.draft_runner.kv_index_translator)
        with torch.inference_mode():
            hidden = self.draft_runner.forward(forward_batch).logits_output.hidden_states
        if rows is None:
            return hidden.view(bs, size, -1), draft_loc
        full = hidden.new_zeros((bs, size, hidden.shape[-1]))  # never verified: their length is 1
        full[index] = hidden.view(drafted, size, -1)
        return full, draft_loc

    def chain_drafts(self, block_hidden: torch.Tensor, verified: torch.Tensor, batch):
        """The drafts [bs, B-1] of the drafter's block features [bs, B, H], and their law q where
        they were sampled (else None): the mask positions' argmax over the target's LM head, or
        at temperature > 0 (unless DFLASH_SGLANG_SAMPLED_DRAFTS=0) a draw from the request's law over
        it (sampling/sampled_drafts.py); a DFlash2 selector's walk over each position's top-k
        candidates (sampled there too, drafter/sampled_walk.py), or Domino's corrected rollout
        (drafter/selector.py, drafter/domino.py)."""
        lm_head = self.target_model.lm_head  # vocab-parallel over its own group (attention TP under DP)
        group = getattr(lm_head, "tp_group", get_parallel().tp_group)
        hidden, drafter = block_hidden[:, 1:], self.draft_model
        logits_of = functools.partial(vocab_parallel_logits, lm_head=lm_head, tp_group=group)
        if drafter.prefix_gru is not None:
            shift, gru, proj = drafter.config.domino_shift_label, drafter.prefix_gru, drafter.embed_proj
            embed, pool = self.target_embedding, self.domino_pool
            return domino_block_drafts(block_hidden, shift, logits_of, gru, proj, verified, embed, pool), None
        selector = drafter.candidate_selector
        info = batch.sampling_info
        sample = self.sampled_drafts and not is_greedy(info)
        if selector is None and sample:
            vocab = self.model_runner.model_config.vocab_size
            drafts, proposal = draw_drafts(hidden, logits_of, info, vocab, batch.reqs)
            return self.tp.sampled_drafts(drafts), proposal
        if selector is None:
            return vocab_parallel_argmax(hidden.flatten(0, 1), lm_head, group).view(hidden.shape[:2]), None
        values, ids = vocab_parallel_topk(hidden.flatten(0, 1), lm_head, selector.top_k, group)
        shape = (*hidden.shape[:2], selector.top_k)
        config = self.draft_model.config
        values, ids = values.view(shape), ids.view(shape)
        if sample:  # SGLang's sampled walk over the lattice
            drafts, proposal = sampled_walk(selector, config, values, ids, hidden, verified, info)
            return self.tp.sampled_drafts(drafts), proposal
        return walk_candidates(selector, config, values, ids, hidden, verified), None

    def tree_block(self, batch, verified, hidden, host_lens, width: int) -> Block:
        tree = tree_verify.build_trees(self.tree, verified, self.draft_vocab.logprobs(hidden), width)
        translators = (self.model_runner.kv_index_translator, self.draft_runner.kv_index_translator)
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        return tree_verify.tree_block(tree, batch, req_to_token, *translators, host_lens)

    @property
    def domino_pool(self) -> int:
        """SGLang's --speculative-domino-candidate-pool-size (0: every token a candidate)."""
        return get_spec().speculative_domino_candidate_pool_size

    @property
    def target_model(self):
        return self.model_runner.model

    def target_embedding(self, ids: torch.Tensor) -> torch.Tensor:
        return self.target_model.get_input_embeddings()(ids)
