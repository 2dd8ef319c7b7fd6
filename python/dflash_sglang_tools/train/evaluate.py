"""Greedy acceptance length of a drafter on held-out prompts, with the engine-free reference."""

from __future__ import annotations

import dataclasses

import torch

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate


@dataclasses.dataclass
class Acceptance:
    block_size: int
    tokens: int  # new tokens over all prompts (the prefill's first token excluded)
    verify_steps: int

    @property
    def mean(self) -> float:
        """Tokens per verify step, as SGLang's spec_accept_length reports it (1..block_size)."""
        return self.tokens / max(self.verify_steps, 1)


@torch.no_grad()
def acceptance(
    target,
    draft: DFlashDraftModel,
    prompts: list[list[int]],
    block_size: int | None = None,
    max_new_tokens: int = 96,
    stop_token_ids=(),
) -> Acceptance:
    was_training = draft.training
    draft.eval()
    device = target.get_input_embeddings().weight.device
    block = block_size or draft.config.block_size
    tokens = steps = 0
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        for ids in prompts:
            out = dflash_generate(
                target, draft, torch.tensor([ids], device=device), max_new_tokens,
                stop_token_ids=stop_token_ids, block_size=block,
            )  # fmt: skip
            tokens += sum(out.accept_lengths)
            steps += len(out.accept_lengths)
    draft.train(was_training)
    return Acceptance(block, tokens, steps)
