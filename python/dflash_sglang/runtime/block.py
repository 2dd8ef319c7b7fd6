"""One decode step's draft block: its tokens, where they sit, the KV plan every phase shares, and
the step's plan (runtime/step_plan.py) it carries from drafting to verifying."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .step_plan import StepPlan


class Block(NamedTuple):
    """One step's draft block and where it lives."""

    tokens: torch.Tensor  # [bs, B] verified token then the drafts
    positions: torch.Tensor  # [bs * B]
    cache_loc: torch.Tensor  # [bs * B] KV slots of the block (target pool ids)
    kv_plan: object  # SGLang's KVLocPlan shared by the draft, the verify and the injection
    draft_loc: torch.Tensor  # [bs, B] the block's slots in the draft pool (what injection writes)
    tree: object = None  # a tree verify's BatchTree (tree/verify.py); None for a chain
    proposal: object = None  # sampled drafts' law q (sampling/sampled_drafts.py); None: point drafts
    plan: StepPlan | None = None  # what the width policy chose for the step (set by drafting)


def block_kv_plan(translator, batch, host_lens: torch.Tensor, cache_loc: torch.Tensor, width: int):
    """SGLang's KV plan for `width` tokens a request written at `cache_loc` after each prefix."""
    return translator.plan(
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens,
        seq_lens_cpu=host_lens,
        write_virtual=cache_loc,
        read_extent=width,
    )


def draft_slots(kv_plan, draft_translator, bs: int, width: int) -> torch.Tensor:
    """The block's slots in the draft pool, where the injection writes (no draft window: the
    target's slot ids, translated), [bs, width]."""
    return kv_plan.write_ids(draft_translator).view(bs, width)


def narrow(block, width: int, batch, translator, host_lens: torch.Tensor):
    """The block's first `width` positions per request, with their own KV plan for the verify."""
    bs, size = block.tokens.shape
    if width == size:
        return block
    cache_loc = block.cache_loc.view(bs, size)[:, :width].flatten()
    kv_plan = block_kv_plan(translator, batch, host_lens, cache_loc, width)
    return block._replace(
        tokens=block.tokens[:, :width],
        positions=block.positions.view(bs, size)[:, :width].flatten(),
        cache_loc=cache_loc,
        kv_plan=kv_plan,
        draft_loc=block.draft_loc[:, :width],
        proposal=None if block.proposal is None else block.proposal.narrow(width - 1),
    )
