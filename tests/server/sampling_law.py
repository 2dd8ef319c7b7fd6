"""Is a server's sampling the target's own law? Two tests of sampled completions (all of one
prompt and one length) against the exact probabilities the target model gives at a temperature:
a chi-square over whole completions, for short ones that repeat, and a sequential probability
integral transform over every token, for long ones that do not."""

from __future__ import annotations

import torch
from scipy import stats


def chisquare_pvalue(model, prompt: list[int], completions: list[list[int]], temperature: float) -> float:
    """Cells are the completions whose expected count is at least 5; all others (sampled or not)
    pool into one "rest" cell, so the test stays valid for outcome spaces larger than the sample."""
    n = len(completions)
    outcomes = sorted({tuple(c) for c in completions})
    counts = torch.tensor([sum(tuple(c) == x for c in completions) for x in outcomes], dtype=torch.float64)
    seqs = torch.tensor([prompt + list(x) for x in outcomes])
    with torch.no_grad():
        logits = model(seqs).logits[:, len(prompt) - 1 : -1].double()
    logp = torch.log_softmax(logits / temperature, -1).gather(-1, seqs[:, len(prompt) :, None])
    expected = logp.squeeze(-1).sum(-1).exp() * n
    keep = expected >= 5
    observed = torch.cat([counts[keep], (n - counts[keep].sum()).view(1)])
    expected = torch.cat([expected[keep], (n - expected[keep].sum()).view(1)])
    return float(stats.chisquare(observed.numpy(), expected.numpy()).pvalue)


def sequential_pit_pvalue(
    model, prompt: list[int], completions: list[list[int]], temperature: float
) -> float:
    """The randomized probability integral transform of every token under the target's law
    given its sampled prefix, u = P(more likely than x) + v * P(x) with v ~ U(0, 1), is exactly
    i.i.d. uniform when the completions follow the target's law (the Rosenblatt transform); a
    Kolmogorov-Smirnov test checks it. Every position counts, so an error in any step's
    conditional law shows."""
    seqs = torch.tensor([prompt + list(c) for c in completions])
    with torch.no_grad():
        logits = model(seqs).logits[:, len(prompt) - 1 : -1].double()
    probs = torch.softmax(logits / temperature, -1)
    tokens = seqs[:, len(prompt) :, None]
    chosen = probs.gather(-1, tokens)
    # Tokens ordered from most to least likely: a law too sharp or too flat shifts u one way.
    below = (probs * (probs > chosen)).sum(-1, keepdim=True)
    jitter = torch.rand(tokens.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = (below + jitter * chosen).clamp(0, 1)
    return float(stats.kstest(u.flatten().numpy(), "uniform").pvalue)


def assert_follows_target_law(model, prompt, completions, p_value=sequential_pit_pvalue) -> None:
    """The samples pass against the target's law at temperature 1 (p > 1e-4), and the same samples
    fail against temperature 0.6 (p < 1e-6): the negative control shows the test can see a
    wrong law."""
    at_1, at_06 = p_value(model, prompt, completions, 1.0), p_value(model, prompt, completions, 0.6)
    print(f"{p_value.__name__}: T=1.0 {at_1:.3g}, T=0.6 {at_06:.3g}")
    assert at_1 > 1e-4
    assert at_06 < 1e-6
