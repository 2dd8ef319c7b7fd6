"""tests/server/law_sampled.py, engine-free: the right rule gives back p, every bug's rule is a law,
and the forward algorithm's ratio is exactly 1 under the right rule and a martingale under p
(its mean over completions drawn from p stays near 1), while a completion drawn from a bug's own
law drives that bug's ratio up."""

import math

import torch

from tests.server.law_sampled import BUG_RULES, after_rule, forward, keep, residual

V, B, L = 12, 4, 24


def laws(generator, rows: int) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, V, generator=generator, dtype=torch.float64) * 1.5, -1)


def test_the_right_rule_gives_back_p_and_every_bug_is_a_law():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        p, q, q_next = laws(g, 3)
        q_raw = q * 0.7
        accept = keep(p, q)
        assert torch.allclose(q * accept + (1 - (q * accept).sum()) * residual(p, q), p)
        for a, r in after_rule(p, q, q_next, q_raw):
            emitted = q * a + (1 - (q * a).sum()).clamp_min(0) * r
            assert math.isclose(float(emitted.sum()), 1.0, rel_tol=1e-9)
    assert len(after_rule(p, q, q_next, q_raw)) == len(BUG_RULES)


def case(seed: int):
    g = torch.Generator().manual_seed(seed)
    p = laws(g, L)
    q_at = []
    for _ in range(L - 1):
        q = laws(g, B - 1)
        q_at.append((q, q * 0.8))
    return g, p, q_at


def sample_bug(p, q_at, bug: int, g) -> torch.Tensor:
    """A completion drawn from bug `bug`'s own law (the process the forward algorithm models)."""
    tokens, start = [int(torch.multinomial(p[0], 1, generator=g))], 0
    for t in range(1, L):
        i = t - start
        if i == B:
            tokens.append(int(torch.multinomial(p[t], 1, generator=g)))
            start = t
            continue
        q, q_raw = q_at[start][0][i - 1], q_at[start][1][i - 1]
        a, r = after_rule(p[t], q, q_at[start][0][i % (B - 1)], q_raw)[bug]
        draft = int(torch.multinomial(q, 1, generator=g))
        if float(torch.rand(1, generator=g, dtype=torch.float64)) < float(a[draft]):
            tokens.append(draft)
        else:
            tokens.append(int(torch.multinomial(r, 1, generator=g)))
            start = t
    return torch.tensor(tokens)


def test_the_ratio_is_a_martingale_under_p_and_grows_under_a_bug():
    usable = torch.ones(L, dtype=torch.bool)
    under_p, under_bug = [], []
    for seed in range(120):
        g, p, q_at = case(seed)
        tokens = torch.stack([torch.multinomial(p[t], 1, generator=g)[0] for t in range(L)])
        under_p.append(forward(q_at, p, tokens, usable, B).exp())
    mean = torch.stack(under_p).mean(0)
    assert (mean < 3).all() and (mean > 0.2).all(), mean  # E = 1 under p, each bug's ratio
    for bug, name in enumerate(BUG_RULES):
        for seed in range(24):
            g, p, q_at = case(1000 + seed)
            under_bug.append(float(forward(q_at, p, sample_bug(p, q_at, bug, g), usable, B)[bug]))
        assert sum(under_bug[-24:]) > 5, f"{name}: its own ratio over 24 completions of its law"
