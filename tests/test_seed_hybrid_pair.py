"""The seed-shaped hybrid pair's plan (train/seed_hybrid_pair.py, `make seed-hybrid-pair`): the
shape of z-lab's Qwen3.5/3.6 drafters, at a width one CPU core trains in an hour."""

from dflash_sglang.drafter.config import default_target_layer_ids
from dflash_sglang_tools.train.seed_hybrid_pair import SeedPlan
from dflash_sglang_tools.train.tiny_hybrid_pair import shape_of


def test_the_plan_is_in_the_seeds_shape():
    plan = SeedPlan()
    kinds = shape_of(plan).layer_types()
    assert plan.target_layers >= 16 and plan.full_attention_interval == 4
    assert kinds == (["linear_attention"] * 3 + ["full_attention"]) * (plan.target_layers // 4)
    assert plan.linear_head_dim >= 32  # SGLang's Triton GDN kernels need K >= 32
    assert plan.draft_layers == 1 and plan.block_size == 16 and 16 in plan.train_block_sizes
    # Five layers spread by z-lab's rule; SGLang captures a layer as the next one's input, so never the last.
    assert plan.target_layer_ids == tuple(default_target_layer_ids(plan.target_layers, 5))
    assert max(plan.target_layer_ids) < plan.target_layers - 1
