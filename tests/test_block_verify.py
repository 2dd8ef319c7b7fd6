"""Block verification (sampling/block_verify.py), engine-free: SGLang's own kernel's law, the
target's law, and never fewer tokens than token-wise verification.

- Against SGLang's Triton kernel (`chain_speculative_sampling_triton(block_verification=True)`),
  run by Triton's interpreter on CPU in a subprocess (sglang_block_kernel_probe.py): the same
  accepted lengths and added tokens for the same probabilities and uniforms.
- The law: N identical requests, drafts sampled from q, a target that ignores its context (so the
  law of position i is row p_i whatever came before). A step that stops short leaves the rest of
  the block to the next step, which starts with the target's own token: the test draws those from
  p, and the joint law of the block's tokens must be the product of the rows'. (Block verification
  keeps the law of the whole output, not of each step's tail: conditioned on a step going on past
  position i, its next token is not p_i.) Shown to catch the planted bugs: the final residual
  without the prefix weight, a prefix accepted with its weight alone, q read at the wrong position.
- Per-request verify lengths (step/ragged.py): a request judging n_i < n drafts judges the block
  cut to n_i, coin for coin, and keeps the law with the rows past it zero; shown to catch its
  bonus drawn from the residual, and a block judged past its own end.
"""

from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from dflash_sglang.sampling import block_verify, sampled_verify
from dflash_sglang.sampling.block_verify import block_rejection_accept
from tests.interpreter_probe import run_probe
from tests.test_sampled_drafts import case, q_at_the_wrong_position, sampled_step

V, S, N = 6, 2, 60_000  # vocabulary, drafts a block, requests a check
ALPHA = 1e-4
SETTINGS = [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}]


def test_equals_sglangs_block_verification_kernel():
    report = run_probe(Path(__file__).with_name("sglang_block_kernel_probe.py"))
    assert report["requests"] == 192
    assert report["lengths_differ"] == 0 and report["tokens_differ"] == 0, report
    for n, counts in report["lengths"].items():  # short, partial and whole blocks were compared
        assert counts[0] > 0 and counts[-1] > 0 and sum(counts[1:-1]) > 0, (n, counts)


def block_step(params: dict, seed: int = 0, block: bool = True, draft_counts=None):
    """One sampled verify of N identical requests through the production path."""
    return sampled_step(params, seed, requests=N, block_verification=block, draft_counts=draft_counts)


def mixed_counts(seed: int = 5) -> torch.Tensor:
    """[N]: each request's own number of drafts, 0 (plain) to S (the whole block)."""
    return torch.randint(0, S + 1, (N,), generator=torch.Generator().manual_seed(seed))


def joint_p_value(accepted, target: torch.Tensor, seed: int = 0) -> float:
    """Chi-square of the block's tokens, completed from p where the step stopped, against the
    product of the rows' laws (0 where a token falls outside their support)."""
    generator = torch.Generator().manual_seed(seed + 99)
    tokens = accepted.tokens.clone()
    for i in range(S + 1):
        fresh = torch.multinomial(target[i].expand(N, V), 1, generator=generator).squeeze(1)
        tokens[:, i] = torch.where(accepted.lengths > i, tokens[:, i], fresh)
    cells = (tokens * V ** torch.arange(S, -1, -1)).sum(1)
    expected = target[0]
    for i in range(1, S + 1):
        expected = (expected.unsqueeze(-1) * target[i]).flatten()
    counts = torch.bincount(cells, minlength=V ** (S + 1)).double()
    if counts[expected == 0].sum() > 0:
        return 0.0  # tokens outside the law's support
    keep = expected > 0
    mass = expected[keep].double()
    return float(chisquare(counts[keep].numpy(), (mass / mass.sum() * N).numpy()).pvalue)


@pytest.mark.parametrize("params", SETTINGS)
def test_block_verification_keeps_the_target_law_and_accepts_at_least_as_much(params):
    accepted, target = block_step(params)
    token_wise, _ = block_step(params, block=False)
    assert (accepted.lengths == S + 1).float().mean() > 0.1  # whole blocks: every row is judged
    assert joint_p_value(accepted, target) > ALPHA
    assert joint_p_value(token_wise, target) > ALPHA  # the check itself holds token by token
    means = [a.lengths.double().mean() for a in (accepted, token_wise)]
    errors = [a.lengths.double().std() / N**0.5 for a in (accepted, token_wise)]
    assert means[0] > means[1] - 3 * (errors[0] ** 2 + errors[1] ** 2) ** 0.5, means


def test_the_dense_reference_keeps_the_target_law():
    draft_logits, target_logits = case()
    q = torch.softmax(draft_logits, -1).expand(N, S, V)
    p = torch.softmax(target_logits, -1).expand(N, S + 1, V)
    generator = torch.Generator().manual_seed(3)
    drafts = torch.multinomial(q.reshape(-1, V), 1, generator=generator).view(N, S)
    accepted = block_rejection_accept(drafts, p, q, generator)
    assert joint_p_value(accepted, torch.softmax(target_logits, -1)) > ALPHA


def residual_without_the_weight(monkeypatch):
    final_law = block_verify.final_law
    monkeypatch.setattr(
        sampled_verify,
        "final_law",
        lambda weight, p, q, bonus: final_law(torch.ones_like(weight), p, q, bonus),
    )


def prefix_accepted_with_its_weight(monkeypatch):
    """h_i = w_i: the residual's share of the prefix left out of its acceptance."""

    def accepted(weights, masses, uniform, counts=None):
        steps = torch.arange(1, uniform.shape[1] + 1)
        return torch.where(uniform < weights[:, 1:], steps, 0).amax(dim=1)

    monkeypatch.setattr(sampled_verify, "accepted_block_length", accepted)


@pytest.mark.parametrize(
    "plant", [residual_without_the_weight, prefix_accepted_with_its_weight, q_at_the_wrong_position]
)
def test_the_law_check_catches_the_planted_bugs(monkeypatch, plant):
    plant(monkeypatch)
    accepted, target = block_step({"temperature": 0.7, "top_k": 3})
    assert joint_p_value(accepted, target) < ALPHA


def test_a_request_judges_the_block_cut_to_its_own_length_coin_for_coin():
    g = torch.Generator().manual_seed(2)
    bs, n = 512, 5
    weights = torch.cat([torch.ones(bs, 1), torch.rand(bs, n, generator=g).cummin(1).values], dim=1)
    weights[: bs // 4, 1:] = 1.0  # blocks the target agrees with throughout
    masses = torch.rand(bs, n, generator=g)
    uniform = torch.rand(bs, n, generator=g)
    counts = torch.randint(0, n + 1, (bs,), generator=g)
    accepted = block_verify.accepted_block_length(weights, masses, uniform, counts)
    for c in range(1, n + 1):
        rows = counts == c
        cut = block_verify.accepted_block_length(weights[rows, : c + 1], masses[rows, :c], uniform[rows, :c])
        assert torch.equal(accepted[rows], cut), c
    assert (accepted[counts == 0] == 0).all()
    assert torch.equal(block_verify.accepted_block_length(weights, masses, uniform, torch.full((bs,), n)),
                       block_verify.accepted_block_length(weights, masses, uniform))  # fmt: skip
    assert (accepted == counts).float().mean() > 0.2  # own blocks are kept whole, not only cut short


@pytest.mark.parametrize("params", SETTINGS)
def test_per_request_lengths_keep_the_target_law(params):
    counts = mixed_counts()
    accepted, target = block_step(params, draft_counts=counts)
    assert (accepted.lengths <= counts + 1).all()
    for c in range(S + 1):  # every request length keeps whole blocks of its own
        assert (accepted.lengths[counts == c] == c + 1).float().mean() > 0.1, c
    assert joint_p_value(accepted, target) > ALPHA


def bonus_from_the_residual(monkeypatch):
    """The ragged_bonus_from_residual bug (tests/planted/bugs.py): a request that kept its own
    block whole draws from normalise(max(w p - q, 0)) at its next position, not from p."""
    rejected = sampled_verify.rejected_q
    monkeypatch.setattr(
        sampled_verify,
        "rejected_q",
        lambda proposal, accepted, vocab, draft_counts: rejected(proposal, accepted, vocab, None),
    )


def judged_past_its_own_end(monkeypatch):
    """Each request's block judged to the full width, past the rows its length verified (zeros)."""
    accepted = block_verify.accepted_block_length
    monkeypatch.setattr(
        sampled_verify,
        "accepted_block_length",
        lambda weights, masses, uniform, counts=None: accepted(weights, masses, uniform),
    )


@pytest.mark.parametrize("plant", [bonus_from_the_residual, judged_past_its_own_end])
def test_the_per_request_law_check_catches_the_planted_bugs(monkeypatch, plant):
    plant(monkeypatch)
    accepted, target = block_step({"temperature": 0.7, "top_k": 3}, draft_counts=mixed_counts())
    assert joint_p_value(accepted, target) < ALPHA
