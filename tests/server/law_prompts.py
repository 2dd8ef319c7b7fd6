"""Which held-out prompt a law test samples: fixed by the target model alone, before any sample
(law_matrix.py's tests and law_case.py import them from law_matrix)."""

from __future__ import annotations

import torch


@torch.no_grad()
def most_uncertain(model, prompts: list[list[int]], steps: int = 8) -> list[int]:
    """The prompt whose greedy continuation leaves the target least sure (the most power per token)."""

    def entropy(prompt: list[int]) -> float:
        seq, total = list(prompt), 0.0
        for _ in range(steps):
            probs = torch.softmax(model(torch.tensor([seq])).logits[0, -1].double(), -1)
            total -= float((probs * probs.clamp_min(1e-300).log()).sum())
            seq.append(int(probs.argmax()))
        return total

    return max(prompts, key=entropy)


@torch.no_grad()
def most_powerful(model, prompts: list[list[int]], steps: int = 8) -> list[int]:
    """The prompt whose greedy continuation's top token is likely yet uncertain (sum of p(1 - p)):
    a good drafter drafts that token, and a wrong acceptance or residual moves its mass most
    where p is near a half (law_statistics.py). Fixed by the model alone, before any sample."""

    def score(prompt: list[int]) -> float:
        seq, total = list(prompt), 0.0
        for _ in range(steps):
            probs = torch.softmax(model(torch.tensor([seq])).logits[0, -1].double(), -1)
            top = float(probs.max())
            total += top * (1 - top)
            seq.append(int(probs.argmax()))
        return total

    return max(prompts, key=score)
