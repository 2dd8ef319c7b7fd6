"""The seed-shaped hybrid pair (train/seed_hybrid_pair.py, `make seed-hybrid-pair`): the shape of
z-lab's Qwen3.5/3.6 drafters, at a width one CPU core trains in an hour; the shipped pair (the
README's `make serve`) as planned, within the package's size, its measured acceptance floor, and
DFlash decoding through it equal to transformers' greedy decoding of the target alone."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.config import default_target_layer_ids
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.train.data import prompt_ids
from dflash_sglang_tools.train.seed_hybrid_pair import EMBEDDED_SEED, SeedPlan, embedded_seed_pair
from dflash_sglang_tools.train.tiny_hybrid_pair import ReplayRollback, shape_of
from dflash_sglang_tools.train.tiny_pair import ACCEPTANCE_FILE, held_out_prompts


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


# ---- the shipped pair (python/dflash_sglang/assets/seed-hybrid-pair) ----------------------------

PAIR = embedded_seed_pair()


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(PAIR.target, dtype=torch.float32).eval()


def test_the_shipped_target_is_the_plans_qwen3_5_hybrid(target):
    saved = json.loads((PAIR.target / "config.json").read_text())
    assert saved["architectures"] == ["Qwen3_5ForCausalLM"] and saved["full_attention_interval"] == 4
    plan = SeedPlan()
    assert target.config.layer_types == shape_of(plan).layer_types()
    assert target.config.linear_key_head_dim >= 32 and target.config.linear_value_head_dim >= 32


def test_the_shipped_drafter_is_one_layer_reading_five_target_layers(target):
    draft = DFlashDraftModel.from_pretrained(PAIR.draft)
    assert draft.config.num_hidden_layers == 1 and draft.config.block_size == 16
    assert tuple(draft.config.target_layer_ids) == SeedPlan().target_layer_ids
    assert draft.config.num_target_layers == target.config.num_hidden_layers


def test_the_shipped_pair_fits_the_package_and_measured_its_acceptance_floor():
    shipped = sum(path.stat().st_size for path in EMBEDDED_SEED.rglob("*") if path.is_file())
    assert shipped <= 25 * 2**20, shipped
    report = json.loads((EMBEDDED_SEED / ACCEPTANCE_FILE).read_text())
    assert report["greedy_acceptance_length"]["16"] >= 4.5, report["greedy_acceptance_length"]
    assert len(held_out_prompts(EMBEDDED_SEED)) >= 16


def test_dflash_decoding_of_the_shipped_pair_is_transformers_greedy(target):
    draft = DFlashDraftModel.from_pretrained(PAIR.draft).eval()
    tokenizer = AutoTokenizer.from_pretrained(PAIR.target)
    prompt = prompt_ids(tokenizer, held_out_prompts(EMBEDDED_SEED)[0])
    with torch.no_grad():  # transformers' own decoding, one token at a time through its hybrid cache
        out = target(torch.tensor([prompt]), use_cache=True)
        cache, greedy = out.past_key_values, []
        for _ in range(32):
            greedy.append(int(out.logits[0, -1].argmax()))
            out = target(torch.tensor([greedy[-1:]]), past_key_values=cache, use_cache=True)
    drafted = dflash_generate(ReplayRollback(target), draft, torch.tensor([prompt]), 32, block_size=16)
    assert drafted.tokens == greedy
