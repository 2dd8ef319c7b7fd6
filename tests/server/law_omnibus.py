"""An omnibus alternative: the law of the next token given the prefix, learned from the samples.

law_statistics.py and law_sampled.py test against the laws of named bugs; a sampler wrong in
another way is seen only where it happens to move what those laws watch. This test names no bug.
Completions of one prompt share their first tokens, so the same prefix h is reached by many of
them, and the target's law p(. | h) there is known exactly (law_matrix.law). Taken in order, each
completion's token at h is predicted from what the completions before it drew at h, over cells
fixed by p alone (the CELLS likeliest tokens at h, each a cell, and the rest as one):

    q(c | h) = (n_h(c) + k p(c | h)) / (n_h + k)      (n_h(c): draws so far in cell c, n_h their sum)

a Dirichlet-smoothed estimate that starts at p and moves toward whatever law the server follows.
Each prefix's product of q / p is averaged over k and mixed with p itself, PRIOR : 1 - PRIOR, so a
prefix where the server keeps p costs at most -log(1 - PRIOR). q depends on the draws before only,
so the product over prefixes is a martingale under p (its mean is exactly 1:
tests/test_law_omnibus.py), like every other alternative of the judge (Ville's inequality; the
completions are independent draws, as a server's requests are). Under another law at a shared
prefix it grows like exp(n KL) less the cost of learning that law (about (CELLS / 2) log(n / k)
nats and log(1 / PRIOR)). A prefix reached once gives a ratio of exactly 1, so only the first
positions count, where completions share prefixes: there a sampled-draft verify judges its first
drafts, and any acceptance rule or residual that is wrong moves the law of the token given h,
whatever its form.
"""

from __future__ import annotations

import math

import torch

CONCENTRATIONS = (4.0, 16.0, 64.0)  # k: how fast the estimate leaves p (a mixture over them)
CELLS = 4  # the likeliest tokens at h, each a cell, and one cell for the rest
PRIOR = 0.05  # each prefix's prior odds of a law of its own: a prefix that keeps p costs <= 0.05 nats


def omnibus_log_ratio(groups: list[tuple]) -> torch.Tensor:
    """The log of the ratio (a 0-d float64 tensor): at each prefix h, (1 - PRIOR) + PRIOR x the
    mean over k of prod q(y | h) / p(y | h) over the completions that reach h, a product over
    prefixes. `groups`: (target [n, L, V] the tested law, tokens [n, L], usable [n, L] the
    positions counted), completions of one prompt and one setting, any lengths, in order."""
    concentrations = torch.tensor(CONCENTRATIONS, dtype=torch.float64)
    counts: dict[tuple, list[int]] = {}  # prefix -> how many completions drew each cell there
    logs: dict[tuple, torch.Tensor] = {}  # prefix -> log prod q / p, one per k
    for target, tokens, usable in groups:
        cell, mass = cells_of(target, tokens)
        for row, completion in enumerate(tokens.tolist()):
            for t in range(len(completion)):
                h = tuple(completion[:t])
                seen = counts.setdefault(h, [0] * (CELLS + 1))
                c, p = int(cell[row, t]), float(mass[row, t])
                if not bool(usable[row, t]) or p <= 0:  # p 0: outside the support, judged apart
                    continue
                step = torch.log((seen[c] / p + concentrations) / (sum(seen) + concentrations))
                logs[h] = logs.get(h, 0) + step
                seen[c] += 1
    total = torch.zeros((), dtype=torch.float64)
    for log_k in logs.values():
        alternative = math.log(PRIOR) + torch.logsumexp(log_k, 0) - math.log(len(CONCENTRATIONS))
        total += torch.logaddexp(torch.tensor(math.log(1 - PRIOR), dtype=torch.float64), alternative)
    return total


def cells_of(target: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, L] each token's cell at its prefix (0 .. CELLS - 1: the likeliest tokens there, ties by
    id; CELLS: the rest), and that cell's mass under p: fixed by p, before any count."""
    top = target.topk(CELLS, dim=-1)  # ties: torch's order, a function of the row alone
    hit = top.indices == tokens.unsqueeze(-1)
    cell = torch.where(hit.any(-1), hit.int().argmax(-1), torch.full_like(tokens, CELLS))
    rest = (1 - top.values.sum(-1)).clamp_min(0)
    mass = torch.cat([top.values, rest.unsqueeze(-1)], -1).gather(-1, cell.unsqueeze(-1)).squeeze(-1)
    return cell, mass


def omnibus_pvalue(log_ratio: torch.Tensor) -> float:
    """1 / the ratio: a valid p-value under p on its own (Ville's inequality)."""
    return min(1.0, math.exp(-float(log_ratio)))
