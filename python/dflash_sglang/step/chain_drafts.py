"""Chain drafts: one path of B-1 drafts from the drafter's block features, by the drafter's kind.

The kind is chosen once, at startup (`chain_drafts_for`), as the acceptance rules are
(step/verifying.py); each turns the block's features [bs, B, H] and the verified tokens [bs] into
the drafts [bs, B-1] and, where they were sampled, their law q (else None: point drafts). The
plain kind draws only the drafts the step verifies (its width - 1 a request): an exploring step at
width 2 pays one LM-head row and one draw a request, not B-1 (at T > 0 each a softmax over the
vocabulary); the walks draft the whole block, which the verify then cuts.

    PlainDrafts     the argmax over the target's LM head at each mask position, or at temperature
                    > 0 (unless DFLASH_SGLANG_SAMPLED_DRAFTS=0) a draw from the request's law over
                    it (sampling/sampled_drafts.py)
    SelectorDrafts  DFlash2: a walk over each position's top-k candidates (drafter/selector.py),
                    sampled at temperature > 0 (SGLang's sample_path, drafter/sampled_walk.py)
    DominoDrafts    Domino: the GRU-corrected rollout, one point path (drafter/domino.py)

`ChainBlocks` writes them into the block after the verified token and cuts it to the step's width.
A tree server drafts trees instead (step/tree_drafting.py).
"""

from __future__ import annotations

import torch
from sglang.srt.runtime_context import get_spec

from ..drafter.domino import domino_block_drafts
from ..drafter.sampled_walk import sampled_walk
from ..drafter.selector import walk_candidates
from ..runtime.block import Block, draft_slots, narrow
from ..runtime.step_plan import StepPlan
from ..sampling.distribution import vocab_parallel_argmax, vocab_parallel_topk
from ..sampling.sampled_drafts import draw_drafts
from ..sampling.target_law import is_greedy
from .target_head import TargetHead
from .tp_agreement import TpAgreement


class PlainDrafts:
    """A DFlash drafter's drafts: the argmax, or sampled at temperature > 0."""

    def __init__(self, head: TargetHead, tp: TpAgreement, sampled: bool, vocab: int):
        self.head, self.tp = head, tp  # sampled drafts: every TP rank verifies rank 0's draws
        self.sampled, self.vocab = sampled, vocab

    def __call__(self, block_hidden: torch.Tensor, verified: torch.Tensor, batch, width: int | None = None):
        """width: the positions the step verifies (None: the block); drafts beyond it are not drawn."""
        hidden, info = block_hidden[:, 1:width], batch.sampling_info
        if hidden.shape[1] == 0:  # a plain step that ran the drafter (a draft window's)
            return torch.empty(hidden.shape[:2], dtype=torch.int64, device=hidden.device), None
        if self.sampled and not is_greedy(info):
            drafts, proposal = draw_drafts(hidden, self.head.logits_of(), info, self.vocab, batch.reqs)
            return self.tp.sampled_drafts(drafts), proposal
        drafts = vocab_parallel_argmax(hidden.flatten(0, 1), self.head.lm_head, self.head.group)
        return drafts.view(hidden.shape[:2]), None


class SelectorDrafts:
    """DFlash2's drafts: its candidate selector's walk over each position's top-k."""

    def __init__(self, head: TargetHead, tp: TpAgreement, sampled: bool, draft_model):
        self.head, self.tp, self.sampled = head, tp, sampled
        self.selector, self.config = draft_model.candidate_selector, draft_model.config

    def __call__(self, block_hidden: torch.Tensor, verified: torch.Tensor, batch, width: int | None = None):
        hidden, selector, config = block_hidden[:, 1:], self.selector, self.config  # its walk: every position
        head, shape = self.head, (*hidden.shape[:2], selector.top_k)
        values, ids = vocab_parallel_topk(hidden.flatten(0, 1), head.lm_head, selector.top_k, head.group)
        values, ids = values.view(shape), ids.view(shape)
        info = batch.sampling_info
        if self.sampled and not is_greedy(info):  # SGLang's sampled walk over the lattice
            drafts, proposal = sampled_walk(selector, config, values, ids, hidden, verified, info)
            return self.tp.sampled_drafts(drafts), proposal
        return walk_candidates(selector, config, values, ids, hidden, verified), None


class DominoDrafts:
    """Domino's drafts: its prefix GRU's corrected rollout over the proposal logits (point drafts)."""

    def __init__(self, head: TargetHead, draft_model):
        self.head = head
        self.shift, self.gru = draft_model.config.domino_shift_label, draft_model.prefix_gru
        self.embed_proj = draft_model.embed_proj
        # SGLang's --speculative-domino-candidate-pool-size (0: every token a candidate)
        self.pool = get_spec().speculative_domino_candidate_pool_size

    def __call__(self, block_hidden: torch.Tensor, verified: torch.Tensor, batch, width: int | None = None):
        drafts = domino_block_drafts(  # its rollout: every position
            block_hidden, self.shift, self.head.logits_of(), self.gru, self.embed_proj, verified,
            self.head.embed, self.pool,
        )  # fmt: skip
        return drafts, None


def chain_drafts_for(draft_model, head: TargetHead, tp: TpAgreement, sampled: bool, vocab: int):
    """The drafter's kind, once: Domino (a prefix GRU), DFlash2 (a candidate selector), else plain.
    `sampled`: drafts at temperature > 0 are sampled (sampling/sampled_drafts.drafts_are)."""
    if draft_model.prefix_gru is not None:
        return DominoDrafts(head, draft_model)
    if draft_model.candidate_selector is not None:
        return SelectorDrafts(head, tp, sampled, draft_model)
    return PlainDrafts(head, tp, sampled, vocab)


class ChainBlocks:
    """A chain's block: the drafts after the verified token, the first `plan.width` positions kept."""

    def __init__(self, drafts, model_runner, draft_runner):
        self.drafts = drafts  # PlainDrafts, SelectorDrafts or DominoDrafts
        self.model_runner, self.draft_runner = model_runner, draft_runner  # their KV translators come later

    def __call__(self, batch, plan: StepPlan, verified, block: Block, hidden, host_lens) -> Block:
        """`block`: [verified token, mask x (B-1)] and where it lives (draft_loc None: no ring, the
        target's slots); `hidden`: the drafter's features over it."""
        tokens = block.tokens
        drafts, proposal = self.drafts(hidden, verified, batch, plan.width)
        tokens[:, 1 : 1 + drafts.shape[1]] = drafts  # past them: masks, cut by the narrow below
        draft_loc = block.draft_loc
        if draft_loc is None:
            draft_loc = draft_slots(block.kv_plan, self.draft_runner.kv_index_translator, *tokens.shape)
        block = block._replace(draft_loc=draft_loc, proposal=proposal)
        return narrow(block, plan.width, batch, self.model_runner.kv_index_translator, host_lens)
