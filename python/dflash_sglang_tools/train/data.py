"""Chat pairs -> token ids with a loss mask, and padded, length-bucketed batches.

A pair is `{"instruction": ..., "response": ...}` (one json object a line in a .jsonl file). It is
tokenized as the target's chat template would serve it: the prompt through the template (with the
generation prompt), then the response and the end-of-turn token, which are the loss tokens.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import torch


@dataclasses.dataclass
class Example:
    input_ids: list[int]
    loss_mask: list[bool]  # True on response tokens (and the final end-of-turn token)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclasses.dataclass
class Batch:
    input_ids: torch.Tensor  # [b, S], right-padded (causal models never look right, so no mask)
    loss_mask: torch.Tensor  # [b, S] bool, False on padding
    lengths: torch.Tensor  # [b]

    def to(self, device) -> Batch:
        return Batch(*(t.to(device) for t in dataclasses.astuple(self)))


def read_jsonl(path: str | Path) -> list[dict]:
    with open(path) as file:
        return [json.loads(line) for line in file if line.strip()]


def prompt_ids(tokenizer, instruction: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": instruction}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode(tokenizer, pair: dict, max_length: int) -> Example | None:
    """Prompt and response tokenized apart (as served), the response closed by the EOS token."""
    prompt = prompt_ids(tokenizer, pair["instruction"])
    response = tokenizer(pair["response"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = (prompt + response)[:max_length]
    if len(ids) <= len(prompt) + 1:
        return None
    return Example(ids, ([False] * len(prompt) + [True] * len(response))[:max_length])


def encode_all(tokenizer, pairs: list[dict], max_length: int) -> list[Example]:
    return [e for e in (encode(tokenizer, p, max_length) for p in pairs) if e is not None]


def collate(examples: list[Example], pad_id: int) -> Batch:
    width = max(len(e) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.bool)
    for row, e in enumerate(examples):
        ids[row, : len(e)] = torch.tensor(e.input_ids)
        mask[row, : len(e)] = torch.tensor(e.loss_mask)
    return Batch(ids, mask, torch.tensor([len(e) for e in examples]))


def length_buckets(examples: list[Example], tokens_per_batch: int) -> list[list[int]]:
    """Indices grouped by similar length, each group at most `tokens_per_batch` padded tokens."""
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i]), i))
    groups, current = [], []
    for i in order:
        if current and (len(current) + 1) * len(examples[i]) > tokens_per_batch:
            groups.append(current)
            current = []
        current.append(i)
    return groups + [current] if current else groups


def epoch_batches(examples: list[Example], tokens_per_batch: int, pad_id: int, seed: int) -> list[Batch]:
    """One epoch: length buckets in a seeded random order (padding stays small, order varies)."""
    groups = length_buckets(examples, tokens_per_batch)
    random.Random(seed).shuffle(groups)
    return [collate([examples[i] for i in group], pad_id) for group in groups]
