"""The sampled judge's likelihood ratios (tests/server/law_sampled.py), computed exactly, not
sampled: under the right acceptance rule (a = min(1, p/q), r = normalise(max(p - q, 0))) the
forward algorithm's ratio to p is 1 for every completion, whatever its tokens; and each bug's ratio
has expectation exactly 1 under p (summed over every completion of a small vocabulary), which is
what makes 1 / mean a valid p-value (law_statistics.py). tests/test_law_sampled.py checks the same
by sampling."""

from __future__ import annotations

from itertools import product

import pytest
import torch

from tests.server import law_sampled
from tests.server.law_sampled import BUG_RULES, forward, keep, residual

B = 3  # the block: two drafts


def laws(generator, rows: int, vocab: int) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, vocab, generator=generator, dtype=torch.float64) * 1.5, -1)


def case(seed: int, length: int, vocab: int):
    g = torch.Generator().manual_seed(seed)
    p = laws(g, length, vocab)
    q_at = [(q, q * 0.8) for q in (laws(g, B - 1, vocab) for _ in range(length - 1))]
    return g, p, q_at


def test_the_right_rule_gives_a_ratio_of_exactly_1_for_every_completion(monkeypatch):
    """Every rule replaced by the right one: the hidden block start no longer matters, each
    position's predictive law is p_t, so the log ratio is 0 to float tolerance for any tokens
    (drawn uniformly here, far from p: the identity holds pointwise, not on average)."""
    length, vocab = 20, 7

    def right_rule(p, q, q_next, q_raw):
        return [(keep(p, q), residual(p, q))] * len(BUG_RULES)

    monkeypatch.setattr(law_sampled, "after_rule", right_rule)
    usable = torch.ones(length, dtype=torch.bool)
    for seed in range(10):
        g, p, q_at = case(seed, length, vocab)
        tokens = torch.randint(vocab, (length,), generator=g)
        log_ratio = forward(q_at, p, tokens, usable, B)
        assert torch.allclose(log_ratio, torch.zeros_like(log_ratio), atol=1e-10), log_ratio


@pytest.mark.parametrize("seed", [0, 1])
def test_every_bugs_ratio_has_expectation_exactly_1_under_p(seed):
    """Sum over all vocab^length completions of p(y) x ratio_bug(y) = 1 for each bug: each bug's
    law is a law over completions, so its ratio to p is a martingale of mean 1 under p."""
    length, vocab = 5, 3
    _, p, q_at = case(seed, length, vocab)
    usable = torch.ones(length, dtype=torch.bool)
    expectation = torch.zeros(len(BUG_RULES), dtype=torch.float64)
    for completion in product(range(vocab), repeat=length):
        tokens = torch.tensor(completion)
        p_y = p[torch.arange(length), tokens].prod()
        expectation += p_y * forward(q_at, p, tokens, usable, B).exp()
    assert torch.allclose(expectation, torch.ones_like(expectation), atol=1e-10), expectation
