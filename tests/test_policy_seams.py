"""The adaptive verify width's seams, engine-free: what reached the target and what the policy
recorded, not the policy's own ledger. Its bugs keep every output exact (the target verifies what
it is given), so no lossless or law test sees them; these tests catch tests/planted/policy_bugs.py
(docs/reliability.md, "Planted policy bugs")."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.runtime.block import Block
from dflash_sglang.sampling.sampled_drafts import DraftProposal
from dflash_sglang.sampling.target_law import RowLaw
from dflash_sglang.step import ragged, verifying
from dflash_sglang.width import controller
from dflash_sglang.width.controller import ADAPTIVE_ENV, WIDTHS_ENV, VerifyWidth
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, LENGTHS_ENV, ragged_seconds

B = 8  # the block


@pytest.fixture(autouse=True)
def no_switches(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    for name in (ADAPTIVE_ENV, LENGTHS_ENV, WIDTHS_ENV, FORCED_LENGTHS_ENV):
        monkeypatch.delenv(name, raising=False)


def batch(size: int, name: str = "r"):
    reqs = [SimpleNamespace(rid=f"{name}{i}", spec_correct_drafts_histogram=[0] * B) for i in range(size)]
    return SimpleNamespace(reqs=reqs, has_grammar=False, sampling_info=None)


def timed(partial_drafter: bool = False, accepted: int = 500) -> VerifyWidth:
    """An adaptive chain server of block 8 with per-request lengths (as on CPU), timed at batch 4
    (plain 10 ms, 16 and 32 verify tokens 12 and 14 ms), past its first widest steps; the pooled
    acceptance `accepted` in 1000 at every position."""
    widths = VerifyWidth(
        B, default_off_because=None, ragged_off_because=None, partial_drafter=partial_drafter
    )
    assert widths.adaptive and widths.per_request
    times = widths.times
    times.add(times.plain, 4, 0.010)
    times.add(times.seconds, 16, 0.012)
    times.add(times.seconds, 32, 0.014)
    widths.acceptance.pooled.accepted = [accepted] * (B - 1)
    widths.acceptance.pooled.reached = [1000] * (B - 1)
    widths.ran_widest = controller.WIDEST_FIRST
    return widths


def mixed(widths: VerifyWidth):
    """Batch 4 whose requests 0 and 2 have had every draft accepted, 1 and 3 none (100 steps
    each, on record): each request's own statistics, as the scheduler's histogram fed them."""
    widths.probed.add(4)  # past batch 4's first step (the widest)
    step = batch(4)
    for i, profile in enumerate(widths.acceptance.profiles(step.reqs)):
        profile.reached = [100.0] * (B - 1)
        profile.accepted = [100.0 if i % 2 == 0 else 0.0] * (B - 1)
    return step


def scheduler_records(req, accepted_drafts: int) -> None:
    """SGLang's result processing (Req.update_spec_correct_drafts_histogram)."""
    hist = req.spec_correct_drafts_histogram
    hist.extend([0] * (accepted_drafts + 1 - len(hist)))
    hist[accepted_drafts] += 1


def test_a_ragged_step_is_recorded_at_each_requests_own_length():
    """A mixed batch verifies its good requests long and its bad ones plain; each request's steps
    are paired with its own length, so a plain request's step tests no draft (a pairing with the
    batch's width would record a failed first draft for it every step)."""
    widths = timed()
    step = mixed(widths)
    plan = widths.choose(step)
    width, lengths = plan.width, plan.lengths
    assert lengths is not None and lengths[1] == lengths[3] == 1 and min(lengths[0], lengths[2]) > 1
    assert width == max(lengths)
    before = [(list(p.reached), list(p.accepted)) for p in widths.acceptance.profiles(step.reqs)]
    for i, req in enumerate(step.reqs):  # the good ones accept all they verified, the bad ones none
        scheduler_records(req, lengths[i] - 1 if i % 2 == 0 else 0)
    after = widths.acceptance.profiles(step.reqs)
    assert [(p.reached, p.accepted) for p in after[1::2]] == before[1::2]  # plain: nothing tested
    good = after[0]
    assert good.reached[: lengths[0] - 1] == [101.0] * (lengths[0] - 1)
    assert good.reached[lengths[0] - 1 :] == [100.0] * (B - lengths[0])  # censored at its length


def test_a_ragged_step_reaches_the_target_as_each_requests_own_positions(monkeypatch):
    """The verify forwards each request's first L_i positions (step/ragged.py), flat, and the
    acceptance rule judges each within its own length: the target sees sum(L_i) tokens, not
    bs x max(L_i)."""
    widths = timed()
    step = mixed(widths)
    plan = widths.choose(step)
    lengths = plan.lengths
    bs, width = len(lengths), max(lengths)
    tokens = torch.arange(bs * width).view(bs, width)  # the narrowed block, distinct tokens
    seen = {}

    def target_forward(batch, block, rows=None):
        seen["tokens"], seen["rows"] = block.tokens.clone(), rows
        logits = torch.zeros(block.tokens.numel(), 5)
        return SimpleNamespace(logits_output=SimpleNamespace(next_token_logits=logits, hidden_states=None))

    def rule(batch, block, logits, target_out, rows):
        seen["judged"] = None if rows is None else list(rows.lengths_cpu)
        seen["logit_rows"] = logits.shape[0]

    monkeypatch.setattr(ragged, "block_kv_plan", lambda *args: None)  # no KV pool here
    monkeypatch.setattr(verifying, "adjust_verify_logits", lambda *args: None)
    worker = SimpleNamespace(model_runner=SimpleNamespace(kv_index_translator=None))
    verify = verifying.Verifying(worker, SimpleNamespace(join=lambda: None), None, rule, None)
    monkeypatch.setattr(verify, "target_forward", target_forward)
    kv_plan = SimpleNamespace(seq_lens_cpu=torch.full((bs,), 10))
    block = Block(tokens, torch.arange(bs * width), torch.arange(bs * width), kv_plan, tokens, plan=plan)
    verify(step, block, None)
    expected = torch.cat([tokens[i, :n] for i, n in enumerate(lengths)])
    assert torch.equal(seen["tokens"], expected) and seen["tokens"].numel() == sum(lengths)
    assert seen["judged"] == list(lengths) and seen["logit_rows"] == bs * width  # scattered back


def test_with_per_request_lengths_a_new_batch_size_still_verifies_the_widest_first():
    """A batch size's first drafted step verifies the whole block for every request (its own point
    then prices its widths), per-request lengths or not; the next steps are each request's own."""
    widths = timed()
    step = batch(4)
    first = widths.choose(step)
    assert first.width == B and first.lengths is None and widths.probed == {4}
    second = widths.choose(step)
    assert second.width < B or second.lengths is not None


def test_with_per_request_lengths_plain_decoding_still_explores():
    """Drafts that never fit: plain decoding for all, yet an exploring step verifies width 2 for
    every request after EXPLORE_EVERY steps (per-request lengths would keep each plain)."""
    widths = timed(accepted=0)
    widths.probed.add(4)
    step = batch(4)
    chosen = []
    for _ in range(3 * controller.EXPLORE_EVERY):
        plan = widths.choose(step)
        chosen.append((plan.width, plan.lengths))
    explored = [i for i, (width, lengths) in enumerate(chosen) if width != 1]
    assert explored and explored[0] == controller.EXPLORE_EVERY - 1
    assert all(chosen[i] == (2, None) for i in explored)  # uniform: every request tests a draft


def test_a_server_without_metrics_warns_of_plain_decoding(caplog):
    """The operator's signal (width/signal.py) is the adaptive width's, with or without
    `--enable-metrics`: drafts that never fit make the steps plain, and the log says so."""
    widths = timed(accepted=0)
    widths.probed.add(1)
    step = batch(1)
    widths.times.add(widths.times.plain, 1, 0.010)
    with caplog.at_level(logging.WARNING, logger="dflash_sglang.width.signal"):
        for _ in range(controller.REPORT_EVERY):
            widths.choose(step)
    assert any("plain decoding on" in record.getMessage() for record in caplog.records)


def test_a_partial_step_is_timed_apart_from_the_uniform_curves():
    """With the partial drafter a ragged step drafts only its requests of length > 1: cheaper than
    the uniform step of its tokens, so its time feeds the fixed share of partial steps
    (width/step_cost.PartialSteps) and is no point of the uniform curves."""
    widths = timed(partial_drafter=True)
    step = mixed(widths)
    plan = widths.choose(step)
    assert 1 in plan.lengths
    seconds = {key: list(value) for key, value in widths.times.seconds.items()}
    widths.step_done(plan)
    assert len(widths.times.partial.recent) == 1
    assert {key: list(value) for key, value in widths.times.seconds.items()} == seconds
    assert 4 not in widths.times.by_batch


def test_a_ragged_step_is_priced_by_its_tokens_and_recorded_at_the_nearest_drafted_width():
    """Pins the rule. A ragged step of lengths (2, 1, 1, 1), every request drafted, verifies 5
    tokens. Priced (request_lengths.ragged_seconds) as the uniform step at its mean width 5/4:
    between the plain step and width 2, the tokens actually verified. Timed, it is a point of the
    token curve at its own 5 tokens, and of batch 4's own curve at width 2 (8 tokens): that curve
    is over whole widths, and a step that verified drafts ran the drafter, so never width 1 (the
    plain steps' own curve, no drafter). Recorded at 2 it prices width 2 a little low: optimistic,
    as every curve here is on purpose (a width priced too low runs and is timed at its own width;
    one priced too high would never run to be corrected, width/step_cost.interpolate)."""
    widths = timed()
    cost = widths.times.curve()
    plain, two = cost.step(4, 1), cost.step(4, 2)
    assert plain < ragged_seconds(cost, 4, 1, 4) < two
    assert ragged_seconds(cost, 4, 1, 4) == pytest.approx(cost.step(4, 1.25))
    widths.forced_lengths = (2, 1, 1, 1)
    plan = widths.choose(batch(4))  # (a forced cycle: the adaptive width neither chooses nor times it)
    assert plan.lengths == (2, 1, 1, 1)
    widths.times.record(4, 2, 0.011, tokens=5)  # what the adaptive choice's `start` keys it as
    assert list(widths.times.seconds[5]) == [0.011] and list(widths.times.by_batch[4][2]) == [0.011]
    key, _ = widths.times.start(4, max(2, round(5 / 4)), 5, None)
    assert key == (4, 2, 5, None)


def proposal(bs: int, size: int, hidden: int = 3, vocab: int = 5) -> DraftProposal:
    """A proposal whose every row is distinct, so a row of the wrong request shows."""
    rows = torch.arange(bs * size, dtype=torch.float32)
    return DraftProposal(
        q_draft=rows.view(bs, size) / 100,
        features=torch.arange(bs * size * hidden, dtype=torch.float32).view(bs, size, hidden),
        law=RowLaw(1 + rows, -rows, 2 * rows),
        logits_of=lambda features: features,
        logits=torch.arange(bs * size * vocab, dtype=torch.float32).view(bs * size, vocab),
    )


@pytest.mark.parametrize("size", [1, 3, 7])
def test_narrow_keeps_each_requests_first_k_positions(size):
    """DraftProposal.narrow(k), for every k in 0..S, against a by-hand reference: request i's
    rows i * S + j for j < k, in every field (q(d), features, the row laws, the kept logits)."""
    bs = 4
    full = proposal(bs, size)
    for k in range(size + 1):
        narrowed = full.narrow(k)
        rows = [i * size + j for i in range(bs) for j in range(k)]
        assert narrowed.q_draft.tolist() == [[full.q_draft[i, j].item() for j in range(k)] for i in range(bs)]
        assert torch.equal(narrowed.features, torch.stack([full.features[i, :k] for i in range(bs)]))
        for name in ("temperature", "cut", "log_norm"):
            assert getattr(narrowed.law, name).tolist() == [getattr(full.law, name)[r].item() for r in rows]
        assert torch.equal(narrowed.logits, full.logits[rows] if rows else full.logits[:0])
        if k:  # q's row at each kept position is the full proposal's
            for j in range(k):
                position = torch.full((bs,), j)
                assert torch.equal(narrowed.rows(position, 5), full.rows(position, 5))
