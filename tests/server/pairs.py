"""Tiny pairs and reference outputs shared by the server tests."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.testing.tiny_dense import CORPUS, TinyShape, write_tiny_pair

HOT_SHAPE = TinyShape(hot_tokens=3)  # a random drafter is often partially, sometimes fully accepted


def make_pair(root: Path, block_size: int, shape: TinyShape = HOT_SHAPE, **draft_fields):
    return write_tiny_pair(root, seed=0, block_size=block_size, shape=shape, **draft_fields)


def chat_prompts(count: int = 16) -> list[str]:
    """User messages of different lengths, cut from the tiny corpus."""
    words = CORPUS.split()
    return [" ".join(words[i : i + 1 + 3 * i]) for i in range(count)]


def word_prompts(pair, count: int = 8) -> list[list[int]]:
    """Token ids of `count` growing prefixes of one sentence (2, 5, 8, ... words)."""
    tokenizer = load(pair.target, pair.draft)[0]
    words = "a small bird sings over the lazy dog while the quick brown fox jumps".split()
    return [tokenizer(" ".join(words[: 2 + 3 * i]))["input_ids"] for i in range(count)]


@functools.lru_cache(maxsize=4)
def load(pair_target: Path, pair_draft: Path):
    target = AutoModelForCausalLM.from_pretrained(pair_target, dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(pair_target), target, DFlashDraftModel.from_pretrained(pair_draft)


def reference(pair, input_ids, max_new_tokens, block_size):
    tokenizer, target, draft = load(pair.target, pair.draft)
    return dflash_generate(
        target, draft, torch.tensor([input_ids]), max_new_tokens,
        stop_token_ids=[tokenizer.eos_token_id], block_size=block_size,
    )  # fmt: skip


def chat(server, content: str, **params) -> dict:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "temperature": 0, **params}
    return server.post("/v1/chat/completions", body)
