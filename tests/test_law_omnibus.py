"""tests/server/law_omnibus.py, engine-free: the omnibus ratio is a martingale under the target's
law (its mean over many samples stays near 1, whatever the law), and it grows past the judge's
threshold under each wrong acceptance rule of tests/planted/sampled_draft_bugs.py, written as
the law it gives the first draft's position, with no model of the rule."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests.server.law_omnibus import omnibus_log_ratio, omnibus_pvalue
from tests.server.law_sampled import residual

V, L = 10, 3


def law_at(prefix: tuple, seed: int, vocab: int = V) -> torch.Tensor:
    """The toy target's law of the next token: fixed by the prefix, peaked, a few likely tokens."""
    g = torch.Generator().manual_seed(hash((seed, prefix)) % (1 << 31))
    return torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 2.0, -1)


def sample(n: int, seed: int, first=None) -> tuple[torch.Tensor, torch.Tensor]:
    """n completions of L tokens of the toy target (`first`: another law at position 0) and the
    target's law at every position [n, L, V]."""
    g = torch.Generator().manual_seed(seed)
    tokens, laws = [], []
    for _ in range(n):
        row, row_laws = [], []
        for t in range(L):
            p = law_at(tuple(row), seed)
            drawn = first if t == 0 and first is not None else p
            row.append(int(torch.multinomial(drawn, 1, generator=g)))
            row_laws.append(p)
        tokens.append(row)
        laws.append(torch.stack(row_laws))
    return torch.tensor(tokens), torch.stack(laws)


def ratio(tokens: torch.Tensor, laws: torch.Tensor) -> torch.Tensor:
    return omnibus_log_ratio([(laws, tokens, torch.ones(tokens.shape, dtype=torch.bool))])


def test_the_ratio_has_mean_one_under_the_target_exactly():
    """E[ratio] = 1 under p: summed over every outcome of 3 completions of 2 tokens (5 tokens, 15,625
    outcomes, prefixes shared and not), weighted by their probability under p."""
    vocab, seed = 5, 1
    laws = {(): law_at((), seed, vocab)} | {(y,): law_at((y,), seed, vocab) for y in range(vocab)}
    paths = [(a, b) for a in range(vocab) for b in range(vocab)]
    weight = {(a, b): float(laws[()][a] * laws[(a,)][b]) for a, b in paths}
    expected = 0.0
    for outcome in itertools.product(paths, repeat=3):
        tokens = torch.tensor(outcome)
        target = torch.stack([torch.stack([laws[()], laws[(a,)]]) for a, _ in outcome])
        expected += math.prod(weight[path] for path in outcome) * float(ratio(tokens, target).exp())
    assert math.isclose(expected, 1.0, rel_tol=1e-9), expected


def test_the_target_itself_passes():
    assert omnibus_pvalue(ratio(*sample(1024, 7))) > 0.05


def first_draft_law(p: torch.Tensor, q: torch.Tensor, accept: torch.Tensor) -> torch.Tensor:
    """The law of the token at a sampled draft's position: kept with `accept`, else the residual."""
    kept = q * accept
    return kept + (1 - kept.sum()) * residual(p, q)


RULES = {
    "accept p, q ignored": lambda p, q: p,
    "accept min(1, (p/q)^2)": lambda p, q: (p / q).pow(2).clamp(max=1),
    "accept min(1, q/p)": lambda p, q: (q / p).clamp(max=1),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_wrong_acceptance_rule_is_caught(rule):
    """q a drafter's law near the target's (a trained drafter), 1,024 completions: the law at the
    first position, moved by the rule, is found: p below the judge's 2.5e-5 with room to spare."""
    seed = 3
    p = law_at((), seed)
    g = torch.Generator().manual_seed(11)
    q = torch.softmax(p.log() + 0.7 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    right = first_draft_law(p, q, (p / q).clamp(max=1))
    assert torch.allclose(right, p)
    wrong = first_draft_law(p, q, RULES[rule](p, q))
    kl = float((wrong * (wrong / p).log()).sum())
    pvalue = omnibus_pvalue(ratio(*sample(1024, seed, first=wrong)))
    assert pvalue < 1e-6, f"{rule}: p {pvalue:.3g} (KL {kl:.3f} nats a sample)"
    assert math.isfinite(kl) and kl > 0
