"""The law of sampled drafts with power: the bugs' own laws, the unseen drafts summed out.

A server that samples its drafts from the drafter's law q (sampling/sampled_drafts.py) cannot have
them read back as law_drafts.py reads point drafts: they are random. Yet the law a buggy sampler
gives each token can still be written down. Given where the current block started (s, the
position of its verified token), position t = s + i (i < B) takes a draft x ~ q_{s,i}, keeps it
with probability a(x), else draws from a residual r, so

    P(y_t = x | s) = q(x) a(x)  [the block goes on]  +  (1 - sum_z q(z) a(z)) r(x)  [a new block at t]

and after B-1 kept drafts the target's own token follows p (a new block at t). The block's start is
hidden, so each bug's law is a hidden Markov model over it, and the forward algorithm gives its
probability of every token given the prefix. With the right rule (a = min(1, p/q), r =
normalise(max(p - q, 0))) every one of those is p_t: the ratio is 1. Each bug below is a law of the
whole completion, fixed by the tokens before each position, so its ratio to p is a martingale
under p (law_statistics.py) and joins the judge's mean of ratios: valid whatever the server does
(another width, a near-tie in q), powerful where the server does what the model says.

q is computed engine-free (drafter/reference.py's `propose`, at every possible block start) under
the request's temperature and filters, as the server draws it (its penalties are the target's only).
"""

from __future__ import annotations

import dataclasses

import torch

from .law_drafts import ChainDrafter
from .law_pattern import draft_logits

ACCEPT_POWERS = (0.5, 2.0)  # keep with min(1, (p/q)^g): a wrong acceptance test


@dataclasses.dataclass(frozen=True)
class SampledDrafter:
    """A chain server's drafter whose drafts are sampled from its law (sampling/sampled_drafts.py)."""

    chain: ChainDrafter
    block_verified: bool = False  # the server judges the drafts as a block (block_verify.py)

    @property
    def block_size(self) -> int:
        return self.chain.block_size


def sampled_log_ratios(
    law, target_model, drafter: SampledDrafter, prompt, completions, params, target, usable
):
    """One log ratio (a 0-d tensor) a bug: log prod_t P_bug(y_t | prefix) / p_t(y_t) over every
    completion. `law` and `target` ([n, L, V], the tested law) as in law_matrix.judge."""
    proposal = {key: value for key, value in params.items() if key != "frequency_penalty"}
    totals = torch.zeros(len(BUG_RULES), dtype=torch.float64)
    for row, completion in enumerate(completions):
        q_at = block_laws(law, target_model, drafter.chain, prompt, completion, proposal)
        totals += forward(q_at, target[row], torch.tensor(completion), usable[row], drafter.block_size)
    return list(totals)


@torch.no_grad()
def block_laws(law, target_model, chain, prompt, completion, params) -> list:
    """[start] -> (q [B-1, V], unnormalised q [B-1, V]): the drafter's law after the verified token
    at each completion index (float64), and the same before its filter's renormalisation."""
    logits = draft_logits(target_model, chain, prompt, completion, list(range(len(completion) - 1)))
    q = law(logits, torch.zeros(logits.shape[:2], dtype=torch.long), params)
    full = torch.softmax(logits / params.get("temperature", 1.0), -1)
    return list(zip(q, q * (full * (q > 0)).sum(-1, keepdim=True), strict=True))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(p - q, 0)), or p where q covers p (no rejection then: any law will do)."""
    rest = (p - q).clamp_min(0)
    mass = rest.sum()
    return rest / mass if mass > 1e-12 else p


def keep(p: torch.Tensor, q: torch.Tensor, power: float = 1.0) -> torch.Tensor:
    ratio = torch.where(q > 0, p / q.clamp_min(1e-300), torch.zeros_like(p))
    return ratio.pow(power).clamp(max=1.0)


def after_rule(p, q, q_next, q_raw):
    """The classic bugs of a sampled-draft verify, each as (accept probabilities, residual)."""
    rules = [(keep(p, q), p)]  # the resample ignores q: it draws from p
    rules += [(keep(p, q, g), residual(p, q)) for g in ACCEPT_POWERS]
    rules.append((keep(p, q), residual(p, q_next)))  # the residual from another position's q
    rules.append((keep(p, q_raw), residual(p, q_raw)))  # q not renormalised after its filter
    return rules


BUG_RULES = ("residual p", "accept (p/q)^0.5", "accept (p/q)^2", "residual of q at i+1", "q unnormalised")


def forward(
    q_at: list, p: torch.Tensor, tokens: torch.Tensor, usable: torch.Tensor, block: int
) -> torch.Tensor:
    """[bugs] log prod_t P_bug(y_t | prefix) / p_t(y_t) of one completion (p [L, V] the target's law)."""
    bugs = len(BUG_RULES)
    belief = {0: torch.ones(bugs, dtype=torch.float64)}  # block start -> P_bug(start | prefix)
    total = torch.zeros(bugs, dtype=torch.float64)
    for t in range(1, len(tokens)):
        y, p_t = int(tokens[t]), p[t]
        predictive = torch.zeros(bugs, dtype=torch.float64)
        nxt: dict[int, torch.Tensor] = {}
        for start, weight in belief.items():
            i = t - start
            if i == block:  # the target's own token after B-1 kept drafts
                go_on, restart = torch.zeros(bugs, dtype=torch.float64), weight * p_t[y]
            else:
                q, q_raw = q_at[start][0][i - 1], q_at[start][1][i - 1]
                q_next = q_at[start][0][i % (block - 1)]
                rules = after_rule(p_t, q, q_next, q_raw)
                kept = torch.stack([q[y] * a[y] for a, _ in rules])
                rejected = torch.stack([(1 - (q * a).sum()).clamp_min(0) * r[y] for a, r in rules])
                go_on, restart = weight * kept, weight * rejected
                nxt[start] = nxt.get(start, 0) + go_on
            nxt[t] = nxt.get(t, 0) + restart
            predictive += go_on + restart
        if bool(usable[t]) and float(p_t[y]) > 0:
            total += predictive.clamp_min(1e-300).log() - float(p_t[y].log())
        # A token the bug's law calls impossible: its ratio is ~0 from here; no 0 / 0 (NaN) belief.
        predictive = torch.where(predictive > 0, predictive, torch.ones_like(predictive))
        belief = {s: w / predictive for s, w in nxt.items()}
    return total
