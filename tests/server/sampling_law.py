"""Is a server's sampling the target's own law over whole short completions? A chi-square test of
sampled completions (all of one prompt and one length) against the exact probabilities the target
model gives at a temperature, on cells fixed in advance by the model alone."""

from __future__ import annotations

import torch
from scipy import stats


@torch.no_grad()
def likely_completions(model, prompt: list[int], length: int, temperature: float, floor: float) -> dict:
    """{completion: probability} for every completion of `length` tokens whose probability is at
    least `floor`, found by expanding only prefixes that are that likely (a completion is never
    likelier than its prefix)."""
    frontier = {(): 1.0}
    for _ in range(length):
        prefixes = list(frontier)
        logits = model(torch.tensor([prompt + list(p) for p in prefixes])).logits[:, -1].double()
        probs = torch.softmax(logits / temperature, -1) * torch.tensor(
            [frontier[p] for p in prefixes]
        ).unsqueeze(1)
        frontier = {
            prefix + (token,): float(probs[row, token])
            for row, prefix in enumerate(prefixes)
            for token in (probs[row] >= floor).nonzero().flatten().tolist()
        }
    return frontier


def chisquare_pvalue(model, prompt: list[int], completions: list[list[int]], temperature: float) -> float:
    """Cells: every completion expected at least 5 times in len(completions) draws, chosen from the
    model before the samples are looked at, and one cell for all others; Pearson's chi-square."""
    n = len(completions)
    cells = likely_completions(model, prompt, len(completions[0]), temperature, 5 / n)
    observed = [sum(tuple(c) == cell for c in completions) for cell in cells]
    expected = [n * p for p in cells.values()]
    observed.append(n - sum(observed))
    expected.append(n - sum(expected))
    return float(stats.chisquare(observed, expected).pvalue)
