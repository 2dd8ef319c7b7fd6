"""sampling/sampled_drafts.py and the sampled verify with a proposal q, engine-free.

The draw follows the request's law over the drafter's logits (temperature and filters; greedy
rows keep the argmax), and the verify stays exact for drafts sampled from q: the first emitted
token follows p at the first position, and the token after an accepted draft follows p at the
next. Each law check is shown to catch the bugs of this code (q read at the wrong position, q not
renormalised after its filter), planted by the test alone.
"""

import pytest
import torch
from scipy.stats import chisquare

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.sampling import sampled_drafts, sampled_verify
from dflash_sglang.sampling.sampled_drafts import SAMPLED_DRAFTS_ENV, draw_drafts, sampled_drafts_requested
from dflash_sglang.sampling.sampled_verify import sampled_accept
from tests.planted.simulate import sampling_info

V, S, N = 6, 2, 40_000  # vocabulary, drafts a block, rows (requests) a check
ALPHA = 1e-4


def identity(features: torch.Tensor) -> torch.Tensor:
    return features  # the features are the drafter's logits here


def law(logits: torch.Tensor, temperature: float, top_k: int = V) -> torch.Tensor:
    scaled = logits / temperature
    kept = torch.full_like(scaled, float("-inf"))
    top = scaled.topk(top_k)
    kept.scatter_(-1, top.indices, top.values)
    return torch.softmax(kept, dim=-1)


def assert_law(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square of token counts against probs (cells with mass; none may fall outside)."""
    counts = torch.bincount(tokens, minlength=V).double()
    assert counts[probs == 0].sum() == 0, "tokens outside the law's support"
    keep = probs > 0
    mass = probs[keep].double()
    expected = mass / mass.sum() * counts.sum()
    return float(chisquare(counts[keep].numpy(), expected.numpy()).pvalue)


def case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    draft_logits = torch.randn(S, V, generator=g) * 1.5
    target_logits = torch.randn(S + 1, V, generator=g) * 1.5
    return draft_logits, target_logits


def test_the_draw_follows_the_request_law_and_greedy_rows_keep_the_argmax():
    draft_logits, _ = case()
    features = draft_logits.expand(N, S, V).clone()
    params = {"temperature": 0.8, "top_k": 4}
    info = sampling_info(params, N)
    info.top_ks[: N // 2] = 1  # greedy rows in the same batch (SGLang gives them top_k 1)
    drafts, proposal = draw_drafts(features, identity, info, V, generator=torch.Generator().manual_seed(1))
    greedy = drafts[: N // 2]
    assert (greedy == draft_logits.argmax(-1)).all() and (proposal.q_draft[: N // 2] == 1).all()
    for position in range(S):
        q = law(draft_logits[position], 0.8, top_k=4)
        assert assert_law(drafts[N // 2 :, position], q) > ALPHA
        assert torch.allclose(proposal.q_draft[N // 2 :, position], q[drafts[N // 2 :, position]])
        assert torch.allclose(proposal.rows(torch.full((N,), position), V)[-1], q, atol=1e-6)


def sampled_step(
    params: dict, seed: int = 0, requests: int = N, block_verification: bool = False, draft_counts=None
):
    """One sampled verify of `requests` identical requests through the production path (drafts
    drawn from q, then sampled_accept); returns (the Acceptance, the target's laws [S + 1, V]).
    draft_counts: [requests] per-request verify lengths minus one; the rows past a request's
    length hold zeros, as the ragged forward leaves them (step/ragged.scatter_back)."""
    draft_logits, target_logits = case(seed)
    info = sampling_info(params, requests)
    generator = torch.Generator().manual_seed(seed + 7)
    features = draft_logits.expand(requests, S, V).clone()
    drafts, proposal = sampled_drafts.draw_drafts(features, identity, info, V, generator=generator)
    logits = target_logits.repeat(requests, 1)  # [requests * (S + 1), V]
    if draft_counts is not None:
        verified = torch.arange(S + 1) <= draft_counts.unsqueeze(1)  # [requests, S + 1]
        logits = logits * verified.flatten().unsqueeze(1)
    accepted = sampled_accept(
        drafts,
        logits,
        info,
        S + 1,
        generator=generator,
        proposal=proposal,
        block_verification=block_verification,
        draft_counts=draft_counts,
    )
    temperature, top_k = params["temperature"], params.get("top_k", V)
    return accepted, torch.stack([law(row, temperature, top_k) for row in target_logits])


def verify(params: dict, seed: int = 0):
    """One sampled verify of N identical requests; returns (tokens, lengths, the target's laws)."""
    accepted, target = sampled_step(params, seed)
    return accepted.tokens, accepted.lengths, target


def exactness_p_values(params: dict) -> list[float]:
    tokens, lengths, target = verify(params)
    after_a_draft = lengths >= 2  # the first draft was accepted: the next token follows p_1
    return [assert_law(tokens[:, 0], target[0]), assert_law(tokens[after_a_draft, 1], target[1])]


@pytest.mark.parametrize("params", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3}])
def test_the_verify_of_sampled_drafts_keeps_the_target_law(params):
    tokens, lengths, _ = verify(params)
    assert (lengths >= 2).float().mean() > 0.2  # drafts are accepted: the check reaches position 1
    assert min(exactness_p_values(params)) > ALPHA


def test_a_width_one_step_with_a_proposal_draws_from_p():
    """The draft window drafts at every width: a width-1 verify gets a proposal narrowed to no
    draft (it crashed a server reading q at position -1); its one token follows p."""
    draft_logits, target_logits = case()
    info = sampling_info({"temperature": 1.0}, N)
    features = draft_logits.expand(N, S, V).clone()
    _, proposal = draw_drafts(features, identity, info, V, generator=torch.Generator().manual_seed(2))
    logits = target_logits[:1].repeat(N, 1)  # [N * 1, V]: the bonus row only
    none = torch.zeros((N, 0), dtype=torch.int64)
    accepted = sampled_accept(none, logits, info, 1, proposal=proposal.narrow(0), block_verification=True)
    assert (accepted.lengths == 1).all()
    assert assert_law(accepted.tokens[:, 0], law(target_logits[0], 1.0)) > ALPHA


def q_at_the_wrong_position(monkeypatch):
    rows = sampled_drafts.DraftProposal.rows
    monkeypatch.setattr(
        sampled_drafts.DraftProposal,
        "rows",
        lambda self, at, v: rows(self, (at + 1) % self.q_draft.shape[1], v),
    )


def q_not_renormalised(monkeypatch):
    """q(d) and q's rows taken before the filter's renormalisation (their kept mass < 1)."""
    draw = sampled_drafts.draw_drafts

    def unnormalised(features, logits_of, info, vocab, reqs=None, generator=None):
        drafts, proposal = draw(features, logits_of, info, vocab, reqs, generator)
        full = torch.logsumexp(
            logits_of(features.flatten(0, 1)).float() / proposal.law.temperature[:, None], -1
        )
        shift = (proposal.law.log_norm - full).view_as(proposal.q_draft)
        proposal.q_draft = proposal.q_draft * shift.exp()
        proposal.law.log_norm = full
        return drafts, proposal

    monkeypatch.setattr(sampled_drafts, "draw_drafts", unnormalised)


def residual_ignores_q(monkeypatch):
    """After a rejection the token drawn from p, not from the residual max(p - q, 0)."""
    monkeypatch.setattr(sampled_verify, "final_law", lambda weight, p_at, q_at, bonus: p_at)


@pytest.mark.parametrize("plant", [q_at_the_wrong_position, q_not_renormalised, residual_ignores_q])
def test_the_law_check_catches_the_planted_bugs(monkeypatch, plant):
    plant(monkeypatch)
    assert min(exactness_p_values({"temperature": 0.7, "top_k": 3})) < ALPHA


def test_the_switch(monkeypatch):
    monkeypatch.delenv(SAMPLED_DRAFTS_ENV, raising=False)
    assert sampled_drafts_requested()  # the default: sampled drafts accept more (docs/sampled-drafts.md)
    monkeypatch.setenv(SAMPLED_DRAFTS_ENV, "0")
    assert not sampled_drafts_requested()
    monkeypatch.setenv(SAMPLED_DRAFTS_ENV, "1")
    assert sampled_drafts_requested()
    monkeypatch.setenv(SAMPLED_DRAFTS_ENV, "maybe")
    with pytest.raises(DFlashConfigError, match=SAMPLED_DRAFTS_ENV):
        sampled_drafts_requested()
