"""The drafter's target features computed once (train/feature_cache.py) equal the per-step target
forward's on a hybrid target, whatever batch a sequence lands in (up to rounding: the delta rule
runs in chunks padded to its own length), and so does the loss."""

import torch

from dflash_sglang_tools.testing.tiny_dense import tiny_draft
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, tiny_hybrid_target
from dflash_sglang_tools.train.blocks import make_blocks, sample_anchors
from dflash_sglang_tools.train.data import Example, collate
from dflash_sglang_tools.train.feature_cache import FeatureCache
from dflash_sglang_tools.train.loss import draft_loss, target_context

SHAPE = HybridShape(target_layers=4, full_attention_interval=2)
MASK = 511


def examples(lengths):
    gen = torch.Generator().manual_seed(3)
    return [Example(torch.randint(4, 500, (n,), generator=gen).tolist(), [False] * 5 + [True] * (n - 5))
            for n in lengths]  # fmt: skip


def test_cached_features_and_loss_equal_the_per_step_forward():
    torch.manual_seed(0)
    target = tiny_hybrid_target(SHAPE, seed=0, vocab_size=512)
    draft = tiny_draft(target.config, SHAPE, seed=1, block_size=4, mask_token_id=MASK)
    layer_ids = draft.config.target_layer_ids
    data = examples([9, 17, 30, 33, 70])
    cache = FeatureCache(target, data, layer_ids, tokens_per_batch=64, pad_id=0)  # 4 batches, by length
    batch = collate([data[4], data[0], data[2]], pad_id=0)  # another batch than any it was built in
    cached = cache(batch)
    fresh = target_context(target, batch.input_ids, layer_ids)
    for row, length in enumerate(batch.lengths.tolist()):
        torch.testing.assert_close(cached[row, :length], fresh[row, :length], atol=1e-4, rtol=1e-3)
        assert not cached[row, length:].any()  # padding: zeros, never in a block's view
    anchors = torch.stack([sample_anchors(m, 6, torch.Generator().manual_seed(0)) for m in batch.loss_mask])
    blocks = make_blocks(batch.input_ids, batch.loss_mask, anchors, 4, MASK, 4.0)
    with torch.no_grad():
        once = draft_loss(target, draft, batch.input_ids, blocks, cached)
        every_step = draft_loss(target, draft, batch.input_ids, blocks)
    torch.testing.assert_close(once.loss, every_step.loss, atol=1e-4, rtol=1e-4)
