"""DFlash2's selector recipe (train/dflash2_selector.py): the loss trains the lattice row the walk
reads, only the selector learns, and what it writes loads as a DFlash2 drafter. Engine-free."""

from __future__ import annotations

import torch

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.selector import select_drafts, unary_scores
from dflash_sglang_tools.testing.tiny_dense import tiny_draft
from dflash_sglang_tools.train.blocks import IGNORE, make_blocks, sample_anchors
from dflash_sglang_tools.train.data import Example, collate
from dflash_sglang_tools.train.dflash2_selector import (
    SelectorRecipe,
    predecessors,
    selector_loss,
    transition_scores,
    with_selector,
)
from dflash_sglang_tools.train.optim import make_optimizer, optimizer_step
from dflash_sglang_tools.train.sampled_acceptance import draft_outputs, drafts_and_q

MASK = 511
RECIPE = SelectorRecipe(top_k=4, rank=8, init_std=0.5)


def test_predecessors_are_the_verified_token_then_the_labels_before():
    ids = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17]])
    blocks = make_blocks(ids, torch.ones_like(ids, dtype=torch.bool), torch.tensor([[1, 4]]), 3, MASK, 4.0)
    assert blocks.labels.tolist() == [[IGNORE, 12, 13, IGNORE, 15, 16]]
    # Position 1's predecessor is the block's verified token, position 2's the label before it.
    assert predecessors(blocks, 3)[0, [1, 2, 4, 5]].tolist() == [11, 12, 14, 15]


def test_teacher_forced_scores_are_the_lattice_rows_the_walk_reads(target):
    """On the path the walk takes while its drafts are right, each position's scores given the
    true predecessor equal the selector's lattice row of that predecessor (drafter/selector.py)."""
    draft = with_selector(tiny_draft(target.config, seed=3, block_size=6, mask_token_id=MASK), RECIPE)
    selector, config = draft.candidate_selector, draft.config
    gen = torch.Generator().manual_seed(4)
    bs, positions, k = 2, 5, RECIPE.top_k
    hidden = torch.randn(bs, positions, config.hidden_size, generator=gen)
    values = torch.randn(bs, positions, k, generator=gen).sort(-1, descending=True).values
    ids = torch.stack([torch.randperm(500, generator=gen)[:k] for _ in range(bs * positions)])
    ids = ids.view(bs, positions, k)
    anchor = torch.tensor([7, 9])
    path = torch.randint(0, k, (bs, positions), generator=gen)  # the candidate each position took
    chosen = ids.gather(-1, path.unsqueeze(-1))[..., 0]
    previous = torch.cat([anchor[:, None], chosen[:, :-1]], dim=1)
    unary = unary_scores(values, config.output_multiplier, config.final_logit_softcapping)
    with torch.no_grad():
        lattice = selector.lattice(ids, unary, hidden, anchor)  # [b, S, K, K]
        rows = torch.cat([lattice[:, :1, 0], lattice[:, 1:].gather(
            2, path[:, :-1, None, None].expand(-1, -1, 1, k))[:, :, 0]], dim=1)  # fmt: skip
        forced = transition_scores(selector, config, values.flatten(0, 1), ids.flatten(0, 1),
                                   hidden.flatten(0, 1), previous.flatten())  # fmt: skip
    torch.testing.assert_close(forced.view(bs, positions, k), rows, rtol=1e-5, atol=1e-5)


def test_selector_steps_lower_its_loss_and_leave_the_backbone_as_it_was(target):
    backbone = tiny_draft(target.config, seed=7, block_size=4, mask_token_id=MASK)
    # Many candidates: an untrained backbone's top few rarely hold the target's token.
    draft = with_selector(backbone, SelectorRecipe(top_k=128, rank=8, init_std=0.5))
    for name, param in draft.named_parameters():
        param.requires_grad_(name.startswith("candidate_selector."))
    for param in target.parameters():
        param.requires_grad_(False)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        examples = []
        for n in (24, 30):
            prompt = torch.randint(0, 500, (1, 6), generator=gen)
            seq = target.generate(prompt, max_new_tokens=n - 6, do_sample=False, min_new_tokens=n - 6)[0]
            examples.append(Example(seq.tolist(), [False] * 6 + [True] * (len(seq) - 6)))
    batch = collate(examples, pad_id=0)
    anchors = torch.stack([sample_anchors(m, 16, torch.Generator().manual_seed(0)) for m in batch.loss_mask])
    blocks = make_blocks(batch.input_ids, batch.loss_mask, anchors, 4, MASK, 4.0)
    params = list(draft.candidate_selector.parameters())
    optimizer, schedule = make_optimizer(params, 3e-2, total_steps=30, warmup_ratio=0.1)
    losses = []
    for _ in range(30):
        out = selector_loss(target, draft, batch.input_ids, blocks, 4)
        losses.append(out.loss.item())
        optimizer_step(out.loss, optimizer, schedule)
    assert out.positions > 10
    assert losses[-1] < 0.7 * losses[0]
    for name, tensor in backbone.state_dict().items():
        torch.testing.assert_close(draft.state_dict()[name], tensor, rtol=0, atol=0)
    assert all(p.grad is None for p in target.parameters())


def test_what_it_writes_loads_as_a_dflash2_drafter(target, tmp_path):
    draft = with_selector(tiny_draft(target.config, seed=3, block_size=4, mask_token_id=MASK), RECIPE)
    draft.save_pretrained(tmp_path)
    config = DFlashConfig.from_pretrained(tmp_path)
    assert config.architecture == "DFlash2DraftModel"
    assert (config.selector_top_k, config.selector_rank) == (RECIPE.top_k, RECIPE.rank)
    loaded = DFlashDraftModel.from_pretrained(tmp_path)
    for name, tensor in draft.state_dict().items():
        if "rotary_emb" not in name:
            torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0)


def test_the_acceptance_tool_walks_the_lattice_greedily_or_samples_it_with_its_q(target):
    """train/sampled_acceptance.py on a DFlash2 drafter: the greedy walk is the reference's
    (select_drafts), and a sampled walk's q is a law over each position's K candidates that gave
    its draft positive mass."""
    draft = with_selector(tiny_draft(target.config, seed=3, block_size=6, mask_token_id=MASK), RECIPE)
    ids = torch.randint(0, 500, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits, hidden = draft_outputs(target, draft, ids, 11, 6)
        walk, none = drafts_and_q(draft, False, logits, hidden, int(ids[0, 11]), 1.0, None)
        expected = select_drafts(
            draft.candidate_selector, draft.config, logits[None], hidden[None], ids[:, 11]
        )
        drafts, q = drafts_and_q(
            draft, True, logits, hidden, int(ids[0, 11]), 1.0, torch.Generator().manual_seed(0)
        )
    assert none is None and walk.tolist() == expected[0].tolist()
    torch.testing.assert_close(q.sum(-1), torch.ones(5))
    candidates = logits.topk(RECIPE.top_k, dim=-1).indices
    assert ((q > 0).sum(-1) <= RECIPE.top_k).all() and (q.gather(-1, candidates).sum(-1) > 0.999).all()
    assert (q.gather(-1, drafts[:, None]) > 0).all()
