"""The tiny pair on disk: the CLI writes a loadable target + tokenizer + drafter in the published
format, and the loaded drafter reproduces the in-memory one exactly."""

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate, propose
from dflash_sglang_tools.testing.tiny_dense import MASK_TOKEN, tiny_draft, tiny_target, write_tiny_pair


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dflash_sglang_tools.testing.tiny",
            "--out",
            str(out),
            "--seed",
            "3",
            "--block-size",
            "8",
        ],
        check=True,
    )
    return out


def test_cli_writes_the_published_layout(pair_dir):
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
        assert (pair_dir / "target" / name).is_file()
    raw = json.loads((pair_dir / "draft" / "config.json").read_text())
    assert raw["architectures"] == ["DFlashDraftModel"] and raw["block_size"] == 8
    assert set(raw["dflash_config"]) == {"mask_token_id", "target_layer_ids"}
    tokenizer = AutoTokenizer.from_pretrained(pair_dir / "target")
    assert tokenizer.convert_tokens_to_ids(MASK_TOKEN) == raw["dflash_config"]["mask_token_id"]
    target = AutoModelForCausalLM.from_pretrained(pair_dir / "target")
    DFlashConfig.from_pretrained(pair_dir / "draft").validate_against(target.config)
    assert target.config.eos_token_id == tokenizer.eos_token_id


def test_cli_hybrid_target_and_sliding_drafter(tmp_path):
    from dflash_sglang_tools.testing.tiny import main

    main(["--out", str(tmp_path), "--hybrid", "--swa", "6", "--block-size", "4"])
    target = json.loads((tmp_path / "target" / "config.json").read_text())
    assert target["architectures"] == ["Qwen3_5ForCausalLM"] and target["full_attention_interval"] == 2
    assert set(target["layer_types"]) == {"linear_attention", "full_attention"}
    draft = DFlashConfig.from_pretrained(tmp_path / "draft")
    assert draft.layer_types == ("sliding_attention", "full_attention") and draft.sliding_window == 6
    assert draft.block_size == 4
    draft.validate_against(AutoModelForCausalLM.from_pretrained(tmp_path / "target").config)


def test_chat_template_round_trips(pair_dir):
    tokenizer = AutoTokenizer.from_pretrained(pair_dir / "target")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a quicksort in Python."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>user\nWrite a quicksort in Python.<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_same_seed_same_pair(tmp_path):
    a, b = write_tiny_pair(tmp_path / "a", seed=5), write_tiny_pair(tmp_path / "b", seed=5)
    for sub in ("target", "draft"):
        assert (a.target.parent / sub / "model.safetensors").read_bytes() == (
            b.target.parent / sub / "model.safetensors"
        ).read_bytes()


def test_loaded_drafter_gives_identical_logits(tmp_path):
    target = tiny_target(seed=2)
    draft = tiny_draft(target.config, seed=4, block_size=8)
    draft.save_pretrained(tmp_path)
    loaded = DFlashDraftModel.from_pretrained(tmp_path)
    g = torch.Generator().manual_seed(0)
    features = torch.randn(1, 11, draft.config.num_target_features * 64, generator=g)
    block = torch.full((1, 8), draft.config.mask_token_id)
    block[0, 0] = 17
    positions = torch.arange(19).view(1, -1)
    logits = []
    with torch.no_grad():
        for model in (draft, loaded):
            cache = DraftContextCache(model.config.num_hidden_layers)
            logits.append(
                propose(target, model, block, positions[:, 11:], features, positions[:, :11], cache)[0]
            )
    assert torch.equal(logits[0], logits[1])


def test_reference_on_the_disk_pair_equals_target_greedy(pair_dir):
    tokenizer = AutoTokenizer.from_pretrained(pair_dir / "target")
    target = AutoModelForCausalLM.from_pretrained(pair_dir / "target").eval()
    draft = DFlashDraftModel.from_pretrained(pair_dir / "draft")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    out = dflash_generate(target, draft, prompt, 30, stop_token_ids=[tokenizer.eos_token_id])
    expected = target.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=30,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    assert out.tokens == expected[0, prompt.shape[1] :].tolist()
