"""Per-request verify lengths without a server: the policy (width/request_lengths.py), its switches,
and the acceptance within each request's own length (step/ragged.py, sampled_verify's
draft_counts), whose law is the law of the block cut to that length. The ragged forward itself is
tested on real servers (tests/server/test_verify_width.py)."""

from itertools import product
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chisquare

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.sampling import sampled_drafts
from dflash_sglang.sampling.accept import greedy_accept
from dflash_sglang.sampling.sampled_verify import sampled_accept
from dflash_sglang.step import ragged
from dflash_sglang.width import controller
from dflash_sglang.width.acceptance_profiles import AcceptanceProfile
from dflash_sglang.width.controller import VerifyWidth
from dflash_sglang.width.request_lengths import (
    FORCED_LENGTHS_ENV,
    LENGTHS_ENV,
    PARTIAL_DRAFTER_ENV,
    drafted_rows,
    forced_lengths,
    partial_drafter_requested,
    ragged_seconds,
    request_lengths,
)
from dflash_sglang.width.step_cost import MIN_STEPS, PRIOR_FIXED_SHARE, PartialSteps, StepCost
from tests.planted.simulate import sampling_info
from tests.test_sampled_drafts import case, identity
from tests.test_sampled_verify import chi_square_pvalue

CURVE = StepCost([(1, 0.010), (8, 0.014), (32, 0.030), (128, 0.110)], drafter_per_request=0.001)


def profile(rates):
    return AcceptanceProfile(len(rates), prior_rates=rates, prior_weight=1.0)


def rate(profiles, lengths, cost):
    tokens = sum(p.expected_tokens(n) for p, n in zip(profiles, lengths, strict=True))
    return tokens / cost.step(len(lengths), sum(lengths) / len(lengths))


@pytest.mark.parametrize("rates", [(0.9, 0.2, 0.6), (0.95, 0.95, 0.1), (0.5, 0.5, 0.5)])
def test_the_lengths_are_the_best_of_all_lengths(rates):
    """Brute force over every length vector of 3 requests at block 4 (lengths 1..4)."""
    profiles = [profile([r] * 3) for r in rates]
    chosen = request_lengths(profiles, CURVE, 4, plain_margin=0.0)
    best = max(rate(profiles, lengths, CURVE) for lengths in product(range(1, 5), repeat=3))
    assert rate(profiles, chosen.lengths, CURVE) == pytest.approx(best, rel=1e-9)


def test_a_mixed_batch_verifies_its_good_requests_long_and_its_bad_ones_plain():
    good, bad = profile([0.9] * 7), profile([0.02] * 7)
    chosen = request_lengths([good, bad, good, bad], CURVE, 8)
    assert chosen.lengths[0] >= 4 and chosen.lengths[2] >= 4
    assert chosen.lengths[1] == chosen.lengths[3] == 1
    useless = request_lengths([bad] * 4, CURVE, 8)
    assert useless.lengths == (1, 1, 1, 1)


def test_the_forced_cycle_mixes_lengths_in_one_batch():
    assert forced_lengths((8, 1, 4), 0, 4, 8).lengths == (8, 1, 4, 8)
    assert forced_lengths((8, 1, 4), 1, 4, 6).lengths == (1, 4, 6, 1)


@pytest.fixture(autouse=True)
def no_dp_attention(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    for name in (LENGTHS_ENV, FORCED_LENGTHS_ENV, controller.WIDTHS_ENV, controller.ADAPTIVE_ENV):
        monkeypatch.delenv(name, raising=False)


def test_the_switches(monkeypatch):
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    assert VerifyWidth(8, ragged_off_because=None).per_request
    assert "per request" in VerifyWidth(8, ragged_off_because=None).describe
    hybrid = VerifyWidth(8, ragged_off_because="a hybrid target's recurrent verify takes one width a batch")
    assert not hybrid.per_request and "one width a batch (a hybrid" in hybrid.describe
    monkeypatch.setenv(LENGTHS_ENV, "0")
    asked_off = VerifyWidth(8, ragged_off_because=None)
    assert not asked_off.per_request and f"one width a batch ({LENGTHS_ENV}=0)" in asked_off.describe
    monkeypatch.setenv(LENGTHS_ENV, "1")
    with pytest.raises(DFlashConfigError, match=f"{LENGTHS_ENV}=1: block verification"):
        VerifyWidth(8, ragged_off_because="block verification judges whole blocks")
    monkeypatch.setenv(LENGTHS_ENV, "maybe")
    with pytest.raises(DFlashConfigError, match=LENGTHS_ENV):
        VerifyWidth(8, ragged_off_because=None)


@pytest.mark.parametrize("text", ["0", "9", "x"])
def test_a_bad_forced_cycle_fails_at_startup_naming_the_switch(monkeypatch, text):
    monkeypatch.setenv(FORCED_LENGTHS_ENV, text)
    with pytest.raises(DFlashConfigError, match=FORCED_LENGTHS_ENV):
        VerifyWidth(8, ragged_off_because=None)


def test_a_forced_cycle_where_the_path_cannot_fails_naming_why(monkeypatch):
    monkeypatch.setenv(FORCED_LENGTHS_ENV, "4,1")
    with pytest.raises(DFlashConfigError, match="a hybrid target's recurrent verify"):
        VerifyWidth(8, ragged_off_because="a hybrid target's recurrent verify takes one width a batch")


def test_the_ragged_rows_and_their_way_back():
    rows = ragged.ragged_rows((2, 1, 3), 3, "cpu")
    assert rows.keep.tolist() == [0, 1, 3, 6, 7, 8]
    values = torch.arange(6.0).unsqueeze(1)
    back = ragged.scatter_back(values, rows).squeeze(1)
    assert back.tolist() == [0, 1, 0, 2, 0, 0, 3, 4, 5]
    assert ragged.layout(rows, "cpu").verify_lens_cpu == [2, 1, 3]


def test_greedy_acceptance_stops_at_each_requests_own_length():
    target = torch.tensor([[5, 6, 7, 8]] * 3)
    drafts = target[:, :-1].clone()  # every draft right: only the lengths stop them
    lengths = torch.tensor([1, 3, 4])
    accepted = greedy_accept(ragged.cap_drafts(drafts, lengths), target)
    assert accepted.lengths.tolist() == [1, 3, 4]


N = 60_000


def step_law(p, drafts, length, residual_at_end=False):
    """{(emitted count, last token): probability} of a point-draft step verifying `length` positions
    (`residual_at_end`: a bug's, the bonus drawn as after a rejection of the next draft)."""
    law, reach = {}, 1.0
    for a in range(length):
        last = a == length - 1
        if last and not residual_at_end:
            final = p[a]
        else:
            final = p[a].clone()
            final[drafts[a]] = 0
            final = final / final.sum()
        stop = 1.0 if last else 1.0 - p[a, drafts[a]].item()
        for x in range(p.shape[-1]):
            law[(a + 1, x)] = reach * stop * final[x].item()
        if not last:
            reach *= p[a, drafts[a]].item()
    return law


def test_a_capped_sampled_step_follows_the_law_of_the_block_cut_to_its_length():
    """Point drafts, block 4, each request verifying 2 positions: the rows past them hold zeros
    (as ragged.scatter_back leaves them). The step follows the 2-position block's law, and not the
    whole block's (the control), nor the law with the bonus drawn from the residual."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 6, generator=g)
    drafts = logits[:3].argmax(-1).unsqueeze(0)
    padded = logits.clone()
    padded[2:] = 0
    info = sampling_info({"temperature": 1.0}, N)
    counts_cap = torch.full((N,), 1)
    out = sampled_accept(
        drafts.expand(N, -1), padded.repeat(N, 1), info, 4, generator=g, draft_counts=counts_cap
    )
    emitted = out.tokens.gather(1, (out.lengths - 1).unsqueeze(1)).squeeze(1)
    counts = {}
    for key in zip(out.lengths.tolist(), emitted.tolist(), strict=True):
        counts[key] = counts.get(key, 0) + 1
    p = torch.softmax(logits.double(), -1)
    assert chi_square_pvalue(counts, step_law(p, drafts[0], 2), N) > 1e-3
    assert chi_square_pvalue(counts, step_law(p, drafts[0], 4), N) < 1e-6
    assert chi_square_pvalue(counts, step_law(p, drafts[0], 2, residual_at_end=True), N) < 1e-6


def test_capped_sampled_drafts_follow_the_law_of_the_block_cut_to_their_length():
    """Drafts sampled from q (block 3, 2 drafts), each request verifying 2 positions: the token
    after an accepted first draft is the bonus, drawn from p at position 1 (q zeroed there)."""
    draft_logits, target_logits = case(4)
    info = sampling_info({"temperature": 1.0}, N)
    generator = torch.Generator().manual_seed(11)
    features = draft_logits.expand(N, -1, -1).clone()
    vocab = draft_logits.shape[-1]
    drafts, proposal = sampled_drafts.draw_drafts(features, identity, info, vocab, generator=generator)
    padded = target_logits.clone()
    padded[2] = 0
    accepted = sampled_accept(
        drafts, padded.repeat(N, 1), info, 3, generator=generator, proposal=proposal,
        draft_counts=torch.full((N,), 1),
    )  # fmt: skip
    assert accepted.lengths.max() == 2
    kept = accepted.lengths == 2
    p1 = torch.softmax(target_logits[1].double(), -1)
    counts = torch.bincount(accepted.tokens[kept, 1], minlength=p1.shape[0]).double()
    assert chisquare(counts.numpy(), (p1 * counts.sum()).numpy()).pvalue > 1e-3
    first = torch.bincount(accepted.tokens[:, 0], minlength=p1.shape[0]).double()
    assert chisquare(first.numpy(), (torch.softmax(target_logits[0].double(), -1) * N).numpy()).pvalue > 1e-3


def partial_rate(profiles, lengths, cost):
    """A step's rate where the drafter runs only for the requests verifying drafts."""
    tokens = sum(p.expected_tokens(n) for p, n in zip(profiles, lengths, strict=True))
    drafted = sum(n > 1 for n in lengths)
    return tokens / ragged_seconds(cost, len(lengths), sum(lengths) - len(lengths), drafted or len(lengths))


@pytest.mark.parametrize("rates", [(0.9, 0.2, 0.6), (0.95, 0.05, 0.05), (0.5, 0.5, 0.5)])
def test_with_a_partial_drafter_the_lengths_are_near_the_best_of_all_lengths(rates):
    """Brute force over every length vector of 3 requests at block 4: the cost now depends on how
    many requests draft, which one pass over the totals does not search in full."""
    profiles = [profile([r] * 3) for r in rates]
    chosen = request_lengths(profiles, CURVE, 4, plain_margin=0.0, partial_drafter=True)
    best = max(partial_rate(profiles, lengths, CURVE) for lengths in product(range(1, 5), repeat=3))
    assert partial_rate(profiles, chosen.lengths, CURVE) >= 0.97 * best


def test_a_partial_drafter_drafts_for_the_one_good_request_where_drafting_all_would_not_pay():
    """One request whose drafts fit among seven whose drafts never do: drafting all eight costs
    more than the good one's drafts bring, drafting only the good one does not."""
    good, bad = profile([0.95] * 7), profile([0.01] * 7)
    # Verify tokens come cheap, the drafter's forward over all eight requests does not.
    drafted = {8: [(2, 0.020), (8, 0.026)]}
    cost = StepCost([(8, 0.010), (64, 0.020)], plain_points=[(8, 0.010)], by_batch=drafted)
    profiles = [good] + [bad] * 7
    assert request_lengths(profiles, cost, 8).lengths == (1,) * 8
    partial = request_lengths(profiles, cost, 8, partial_drafter=True)
    assert partial.lengths[0] >= 4 and partial.lengths[1:] == (1,) * 7
    assert drafted_rows(partial.lengths) == [0]
    assert drafted_rows((3, 3)) is None and drafted_rows(None) is None


def test_the_fixed_share_of_a_partial_step_is_learnt_from_its_times():
    """Steps drafting 2 of 8 requests that cost as much as drafting all 8 imply a fixed share of 1;
    ones that cost a quarter of the uniform step's extra, 0. Before MIN_STEPS, the prior."""
    cost = StepCost([(8, 0.010), (64, 0.020)], plain_points=[(8, 0.010)], by_batch={8: [(2, 0.020)]})
    steps = PartialSteps()
    assert steps.fixed_share(cost) == PRIOR_FIXED_SHARE
    for _ in range(MIN_STEPS):  # 2 of 8 drafted, one draft each: the uniform width-2 step costs 0.020
        steps.record(8, 2, 10, 0.020)
    assert steps.fixed_share(cost) == pytest.approx(1.0)
    for _ in range(15):
        steps.record(8, 2, 10, 0.0125)
    assert steps.fixed_share(cost) == pytest.approx(0.0)
    cost.partial_fixed = 1.0  # then a partial step is priced as the uniform one
    assert ragged_seconds(cost, 8, 2, 2) == pytest.approx(cost.step(8, 2))


def test_the_partial_drafter_switch(monkeypatch):
    monkeypatch.delenv(PARTIAL_DRAFTER_ENV, raising=False)
    assert not partial_drafter_requested(None)  # off by default
    monkeypatch.setenv(PARTIAL_DRAFTER_ENV, "1")
    assert partial_drafter_requested(None)
    with pytest.raises(DFlashConfigError, match="PARTIAL_DRAFTER=1 with --speculative-draft-window-size"):
        partial_drafter_requested(64)


@pytest.mark.parametrize("partial", [True, False])
def test_the_plan_names_the_requests_a_partial_drafter_drafts(monkeypatch, partial):
    """The step's plan carries the drafted rows to drafting (step/drafting.py): with the partial
    drafter, the requests that verify drafts (length > 1); without it, None (every request)."""
    monkeypatch.setenv(FORCED_LENGTHS_ENV, "8,1,4")
    widths = VerifyWidth(8, ragged_off_because=None, partial_drafter=partial)
    batch = SimpleNamespace(reqs=[object()] * 4)
    plan = widths.choose(batch)
    assert plan.lengths == (8, 1, 4, 8) and plan.width == 8 and plan.widest
    assert plan.drafted == ((0, 2, 3) if partial else None)
