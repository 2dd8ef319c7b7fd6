"""The shipped tiny hybrid pair (python/dflash_sglang/assets/tiny-hybrid-pair, `make tiny-hybrid-pair`):
a Qwen3.5-style target SGLang loads, a drafter reading layers it has, and acceptance as measured."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.train.data import prompt_ids
from dflash_sglang_tools.train.evaluate import acceptance
from dflash_sglang_tools.train.tiny_hybrid_pair import EMBEDDED_HYBRID, ReplayRollback, embedded_hybrid_pair
from dflash_sglang_tools.train.tiny_pair import ACCEPTANCE_FILE, held_out_prompts

PAIR = embedded_hybrid_pair()


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(PAIR.target, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def draft():
    return DFlashDraftModel.from_pretrained(PAIR.draft).eval()


def test_the_target_is_a_qwen3_5_hybrid_sglang_loads(target):
    saved = json.loads((PAIR.target / "config.json").read_text())
    assert saved["architectures"] == ["Qwen3_5ForCausalLM"]
    assert type(target).__name__ == "Qwen3_5ForCausalLM"
    config = target.config
    assert saved["full_attention_interval"] == 4  # SGLang derives the layer kinds from it
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    # SGLang's Triton GDN kernels (ReplaySSM) need head dims of at least 32.
    assert config.linear_key_head_dim >= 32 and config.linear_value_head_dim >= 32
    assert config.linear_conv_kernel_dim == 4 and config.hidden_size == 128


def test_the_drafter_reads_layers_the_target_has(target, draft):
    config = draft.config
    assert config.num_target_layers == target.config.num_hidden_layers
    assert all(0 <= i < target.config.num_hidden_layers - 1 for i in config.target_layer_ids)
    assert config.block_size == 8 and config.vocab_size == target.config.vocab_size


def test_the_build_measured_three_tokens_a_step_at_block_8():
    report = json.loads((EMBEDDED_HYBRID / ACCEPTANCE_FILE).read_text())
    assert report["greedy_acceptance_length"]["8"] >= 3.0
    assert report["plan"]["full_attention_interval"] == 4


def test_dflash_decoding_is_transformers_greedy_with_accepted_drafts(target, draft):
    tokenizer = AutoTokenizer.from_pretrained(PAIR.target)
    prompts = [prompt_ids(tokenizer, text) for text in held_out_prompts(EMBEDDED_HYBRID)[:2]]
    with torch.no_grad():  # transformers' own decoding, one token at a time through its hybrid cache
        out = target(torch.tensor([prompts[0]]), use_cache=True)
        cache, greedy = out.past_key_values, []
        for _ in range(24):
            greedy.append(int(out.logits[0, -1].argmax()))
            out = target(torch.tensor([greedy[-1:]]), past_key_values=cache, use_cache=True)
    rollback = ReplayRollback(target)
    assert dflash_generate(rollback, draft, torch.tensor([prompts[0]]), 24, block_size=8).tokens == greedy
    measured = acceptance(rollback, draft, prompts, 8, 24)
    assert measured.mean > 1.5, measured
