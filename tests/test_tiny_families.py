"""The tiny family targets on disk (testing/tiny_families.py). For gpt-oss: the published config
fields, and each of its particular features (the sliding window, the attention sinks, the clamped
SwiGLU) changes transformers' greedy output on the test prompts, so a server that got one of them
wrong could not equal transformers' decoding (tests/server/test_families.py)."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from dflash_sglang_tools.testing.tiny_families import GPT_OSS_WINDOW, write_tiny_family_pair

PROMPTS = [[10 + (7 * i + 13 * n) % 290 for i in range(n)] for n in (9, 31)]  # past the window


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return write_tiny_family_pair(tmp_path_factory.mktemp("gpt_oss"), "gpt_oss").target


@pytest.fixture(scope="module")
def reference(gpt_oss):
    model = load(gpt_oss)
    return [greedy(model, ids) for ids in PROMPTS]


def load(path, **config):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **config).eval()


@torch.no_grad()
def greedy(model, input_ids, new_tokens=16):
    out = model(torch.tensor([input_ids]), use_cache=True)
    tokens = []
    for _ in range(new_tokens):
        tokens.append(int(out.logits[0, -1].argmax()))
        out = model(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return tokens


def test_gpt_oss_config_is_the_published_format(gpt_oss):
    config = json.loads((gpt_oss / "config.json").read_text())
    assert config["architectures"] == ["GptOssForCausalLM"]
    assert config["layer_types"][:2] == ["sliding_attention", "full_attention"]
    assert config["sliding_window"] == GPT_OSS_WINDOW
    assert config["rope_parameters"]["rope_type"] == "yarn"
    assert (config["num_local_experts"], config["num_experts_per_tok"]) == (4, 2)


def test_gpt_oss_sinks_are_nonzero_bfloat16_values(gpt_oss):
    sinks = torch.stack([layer.self_attn.sinks for layer in load(gpt_oss).model.layers])
    assert (sinks != 0).all()
    assert torch.equal(sinks, sinks.bfloat16().float())  # SGLang loads them into bfloat16


def without_sinks(model):
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-torch.inf)
    return model


@pytest.mark.parametrize(
    "variant",
    [
        lambda path: load(path, sliding_window=4096),  # every layer sees everything
        lambda path: load(path, swiglu_limit=1e9),  # no clamp
        lambda path: without_sinks(load(path)),
    ],
    ids=["no_window", "no_clamp", "no_sinks"],
)
def test_each_gpt_oss_feature_changes_the_greedy_output(gpt_oss, reference, variant):
    other = variant(gpt_oss)
    assert [greedy(other, ids) for ids in PROMPTS] != reference
