"""Alternatives in which a verify coin is one seen before: coins correlated across a block's
positions, steps or requests, judged through what the earlier coin's outcome says of it.

A token-wise verify keeps draft x at block position i when its coin u < a(x) = min(1, p(x) / q(x))
(q one-hot at the draft for point drafts). An outcome bounds its coin: a draft kept as token y says
u < a(y); a rejection (the step's own token at i) says u >= a(d) for the hidden draft d, whose
likelihood over u is R(u) = sum_d q(d) [u >= a(d)]. If a later coin is that one again (a block's
next position reusing it, or 1 - it; a step reusing a row's coins; requests sharing them), its
law is the earlier outcome's likelihood, normalised, and the token at t follows

    P(y) = E_u[ q(y) [u < a(y)] + (1 - sum_z q(z) [u < a(z)]) res(y) ],   res = normalise(max(p - q, 0))

which under a uniform u is p(y) exactly. With probability lam the coin is the earlier one, else
fresh: lam P + (1 - lam) p, a law fixed by the past, so its ratio to p is a martingale under p
(law_joint.py's argument), averaged over LAMBDAS. u's law is kept on COIN_BINS equal bins, uniform
inside each, so every probability above is exact, not a discretisation. Sources of the earlier
coin, one alternative each (SOURCES): the same block's previous position (u, or 1 - u), the same
position of this completion's previous step, of the completion 1, 2 or 3 before it in the batch at
the same step, and of every earlier completion of the batch at once (one coin for the batch). Block
verification reads its coins otherwise (the longest prefix under h_i), so it is judged without these.
"""

from __future__ import annotations

import math

import torch

COIN_BINS = 32
LAMBDAS = (0.25, 0.5, 1.0)
SOURCES = ("previous position", "previous position, 1 - u", "previous step", "request before",
           "2 requests before", "3 requests before", "the whole batch")  # fmt: skip
EDGES = torch.arange(COIN_BINS, dtype=torch.float64)


def below(a: torch.Tensor) -> torch.Tensor:
    """[..., COIN_BINS]: P(u < a | u in bin j), for a [...] in [0, 1]."""
    return (a.unsqueeze(-1) * COIN_BINS - EDGES).clamp(0, 1)


class CoinLedger:
    """The coins' outcomes seen so far in one batch, and each source's log ratio."""

    def __init__(self):
        self.logs = torch.zeros(len(SOURCES), len(LAMBDAS), dtype=torch.float64)
        self.seen: dict[tuple[int, int, int], torch.Tensor] = {}  # (row, step, i) -> likelihood [bins]
        self.batch: dict[tuple[int, int], torch.Tensor] = {}  # (step, i) -> product over the rows so far

    def position(self, row: int, step: int, i: int, p, q, y: int, kept: bool, counted: bool) -> None:
        """Judge token y at (row, step, block position i) and remember its coin's outcome: `kept`
        (an accepted draft) or not (a rejection). Rows come in order, each position once."""
        a = torch.where(q > 0, (p / q.clamp_min(1e-300)).clamp(max=1.0), torch.zeros_like(p))
        ok = below(a)  # [V, bins]
        kept_mass = (q.unsqueeze(-1) * ok).sum(0)  # [bins]: sum_z q(z) [u < a(z)]
        rest = (p - q).clamp_min(0)
        res_y = float(rest[y] / rest.sum()) if float(rest.sum()) > 1e-12 else float(p[y])
        given_u = float(q[y]) * ok[y] + (1 - kept_mass) * res_y  # [bins]: P(y | u in bin j)
        if counted and float(p[y]) > 0:
            for s, likelihood in enumerate(self.sources(row, step, i)):
                if likelihood is None or float(likelihood.sum()) <= 0:
                    continue
                law = float((likelihood / likelihood.sum() * given_u).sum())
                for k, lam in enumerate(LAMBDAS):
                    self.logs[s, k] += math.log(max(lam * law + (1 - lam) * float(p[y]), 1e-300)) - math.log(
                        float(p[y])
                    )
        outcome = ok[y] if kept else 1 - kept_mass
        self.seen[(row, step, i)] = outcome
        product = self.batch.get((step, i), torch.ones(COIN_BINS, dtype=torch.float64)) * outcome
        self.batch[(step, i)] = product / product.max() if float(product.max()) > 0 else product

    def sources(self, row: int, step: int, i: int) -> list:
        previous = self.seen.get((row, step, i - 1)) if i >= 2 else None
        return [
            previous,
            None if previous is None else previous.flip(0),
            self.seen.get((row, step - 1, i)),
            self.seen.get((row - 1, step, i)),
            self.seen.get((row - 2, step, i)),
            self.seen.get((row - 3, step, i)),
            self.batch.get((step, i)),
        ]

    def log_ratios(self) -> list[torch.Tensor]:
        """One log ratio a source: the mean over LAMBDAS of its products."""
        return list(torch.logsumexp(self.logs, -1) - math.log(len(LAMBDAS)))
