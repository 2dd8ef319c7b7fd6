"""tests/server/law_joint.py and law_coins.py, computed exactly: every alternative's ratio has
expectation 1 under a right verify, summed over every outcome (tokens and acceptance pattern) of
small cases, token-wise and as a block. That is what makes the judge's 1 / mean a valid p-value
(Ville's inequality); a feature or context that read the token it judges, or the step's own count
before its end, would break it."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.server.law_joint import joint_log_ratios
from tests.server.law_pattern import Group, Steps


def tables(vocab: int, block: int, seed: int):
    """A bigram target (p after each token, p0 the first token's law) and the drafter's law q
    [V, B-1, V] after each verified token, peaked enough that min(p, q) and the residual both matter."""
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(vocab, vocab, generator=g, dtype=torch.float64) * 1.5, -1)
    q = torch.softmax(torch.randn(vocab, block - 1, vocab, generator=g, dtype=torch.float64) * 1.5, -1)
    return p[0], p, q


def outcomes(p0, p, q, length: int, block: int, token_wise: bool):
    """Every (tokens, steps, probability) of one completion of `length` under a right verify:
    at block position i with prefix weight w the block goes on with x with min(q_i(x) / w, p(x))
    and ends with x with max(p(x) - q_i(x) / w, 0) (w = 1 token by token), then w = min(1, w p / q);
    after B-1 drafts the bonus follows p."""
    vocab = p0.shape[0]
    done = []

    def grow(tokens, counts, start, weight, prob):
        t = len(tokens)
        if t == length:
            done.append((tokens, counts, prob))
            return
        i = t - start
        law = p[tokens[-1]]
        if i == block:  # the bonus
            for x in range(vocab):
                grow(tokens + [x], counts + [i], t, 1.0, prob * float(law[x]))
            return
        q_i = q[tokens[start], i - 1] / (weight if not token_wise else 1.0)
        for x in range(vocab):
            on, end = float(torch.minimum(q_i[x], law[x])), float((law[x] - q_i[x]).clamp_min(0))
            if on > 0:
                w = 1.0 if token_wise else min(1.0, weight * float(law[x] / q[tokens[start], i - 1, x]))
                grow(tokens + [x], counts, start, w, prob * on)
            if end > 0:
                grow(tokens + [x], counts + [i], t, 1.0, prob * end)

    for x in range(vocab):
        grow([x], [], 0, 1.0, float(p0[x]))
    # The last step, cut at `length`: its count says only what the positions seen did.
    return [(tokens, closed(tokens, counts, block), prob) for tokens, counts, prob in done]


def closed(tokens, counts, block):
    seen = 1 + sum(counts)
    return Steps(counts + ([len(tokens) - seen + 1] if seen < len(tokens) else []))


def expectations(p0, p, q, rows, block: int, token_wise: bool) -> torch.Tensor:
    """E[ratio] of every alternative over `rows` completions' joint outcomes."""
    per_row = outcomes(p0, p, q, LENGTH[rows], block, token_wise)
    total = 0
    for combo in itertools.product(per_row, repeat=rows):
        tokens = torch.tensor([c[0] for c in combo])
        target = torch.stack([torch.stack([p0] + [p[y] for y in c[0][:-1]]) for c in combo])
        prob = float(torch.tensor([c[2] for c in combo], dtype=torch.float64).prod())

        def q_rows(row, starts, tokens=tokens):
            return q[tokens[row, starts]]

        group = Group(target, tokens, torch.ones(tokens.shape, dtype=torch.bool), [c[1] for c in combo],
                      block, q=q_rows, token_wise=token_wise)  # fmt: skip
        total = total + prob * torch.stack(joint_log_ratios([group])).exp()
    return total


LENGTH = {1: 4, 2: 3}


@pytest.mark.parametrize("token_wise", [True, False], ids=["token-wise", "block"])
def test_every_alternative_has_expectation_1_in_a_block_and_across_steps(token_wise):
    """One completion of 4 tokens over 3 tokens, block 3: the first block's two drafts, a bonus
    or the next step's (the contexts and coins within a block and across steps)."""
    p0, p, q = tables(3, 3, seed=0)
    expected = expectations(p0, p, q, 1, 3, token_wise)
    assert torch.allclose(expected, torch.ones_like(expected), atol=1e-9), expected


def test_every_alternative_has_expectation_1_across_requests():
    """Two completions of 3 tokens over 2 tokens (the contexts and coins across requests)."""
    p0, p, q = tables(2, 3, seed=1)
    expected = expectations(p0, p, q, 2, 3, True)
    assert torch.allclose(expected, torch.ones_like(expected), atol=1e-9), expected
