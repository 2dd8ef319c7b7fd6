"""Acceptance rules on synthetic logits: zero, partial and full acceptance, the bonus token,
and rejection sampling's output distribution (statistical, fixed seed)."""

import torch

from dflash_sglang.sampling.accept import greedy_accept, rejection_accept


def test_greedy_zero_partial_full_acceptance_and_bonus():
    target = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 8]])
    drafts = torch.tensor([[9, 6, 7], [5, 6, 9], [5, 6, 7]])  # reject first, accept two, accept all
    lengths, tokens = greedy_accept(drafts, target)
    assert lengths.tolist() == [1, 3, 4]
    assert tokens[0, :1].tolist() == [5]  # the target's correction replaces the first draft
    assert tokens[1, :3].tolist() == [5, 6, 7]  # two drafts, then the correction 7 (draft was 9)
    assert tokens[2, :4].tolist() == [5, 6, 7, 8]  # all drafts, then the bonus token 8


def test_greedy_stops_at_first_mismatch_even_if_later_drafts_match():
    target = torch.tensor([[1, 2, 3, 4, 5]])
    drafts = torch.tensor([[1, 9, 3, 4]])
    lengths, tokens = greedy_accept(drafts, target)
    assert lengths.tolist() == [2]
    assert tokens[0, :2].tolist() == [1, 2]


def one_hot(index, vocab):
    return torch.nn.functional.one_hot(torch.tensor(index), vocab).float()


def test_rejection_point_mass_cases():
    vocab = 4
    # The target is certain of token 2 at every position: a draft of 2 is always accepted.
    p = one_hot([2, 2, 2], vocab).unsqueeze(0)
    lengths, tokens = rejection_accept(torch.tensor([[2, 2]]), p)
    assert lengths.tolist() == [3] and tokens[0].tolist() == [2, 2, 2]
    # A draft the target gives zero probability is always rejected, and never re-emitted.
    p = torch.tensor([[[0.0, 0.5, 0.5, 0.0]] * 3])
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        lengths, tokens = rejection_accept(torch.tensor([[3, 1]]), p, generator=g)
        assert lengths.tolist() == [1] and tokens[0, 0].item() in (1, 2)


def total_variation(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    return 0.5 * (counts / counts.sum() - probs.double()).abs().sum().item()


def test_rejection_sampling_emits_the_target_distribution():
    """Each position's emitted token follows the target's p exactly, for sampled and point drafts.

    p and q are fixed per position, so the token at position i, given that the step reaches i,
    must be distributed as p_i. With 200k rows the sampling noise in TV is about 0.003.
    """
    g = torch.Generator().manual_seed(0)
    n, block, vocab = 200_000, 3, 5
    target_logits = torch.randn(block, vocab, generator=g) * 2
    p = torch.softmax(target_logits, -1)
    # A drafter that roughly agrees with the target (so both accepts and rejects happen).
    q = torch.softmax(target_logits[:-1] + torch.randn(block - 1, vocab, generator=g), -1)
    target_probs = p.expand(n, block, vocab)
    drafts = torch.multinomial(q, n, replacement=True, generator=g).T  # [n, B-1] from q
    for draft_probs in (q.expand(n, block - 1, vocab), None):
        if draft_probs is None:  # point proposals: the argmax of q, as a greedy drafter gives
            drafts = q.argmax(-1).expand(n, block - 1)
        lengths, tokens = rejection_accept(drafts, target_probs, draft_probs, generator=g)
        assert total_variation(tokens[:, 0], p[0]) < 0.01
        reached = lengths >= 2
        assert reached.sum() > 10_000  # position 1 is exercised, not just position 0
        assert total_variation(tokens[reached, 1], p[1]) < 0.015
    # Negative control: a point-draft verify whose resample keeps the rejected draft (draws from p,
    # not the residual) fails the same bound, so the bound can see that classic bug.
    point = q.argmax(-1)[0].expand(n)
    accepted = torch.rand(n, generator=g) < p[0, point]
    buggy = torch.where(accepted, point, torch.multinomial(p[0], n, replacement=True, generator=g))
    assert total_variation(buggy, p[0]) > 0.05
