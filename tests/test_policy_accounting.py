"""The width policy's accounting, as properties over many steps (issue 64 item 4), engine-free.

The adaptive width (width/controller.py) chooses each step's plan and learns from what the step
cost; whatever it chooses the outputs stay exact, so only its own accounting can show a bug. Here
an adaptive policy runs several hundred steps of random batches (sizes 1-8, requests whose drafts
fit well, badly or not at all, the scheduler's acceptance records fed back after each step) and
every step is checked against three rules a reader can state:

- **a plan is what it says**: a width within the block, per-request lengths only where they differ
  (uniform lengths are one width a batch), the width their longest, and the partial drafter's rows
  exactly those of length above 1;
- **it reaches the target in the layout it implies** (step/verifying.py, the target's forward
  replaced by a recorder): a uniform block of `width` positions where there are no lengths, each
  request's own first L_i positions flat where there are, and the plain step's rule (SGLang's own
  sampler, sampling/plain_draw.py) exactly at width 1;
- **each step's time is filed under the shape the step ran** (width/step_times.py): one record a
  timed step, keyed by its batch size, its width (a ragged step's nearest whole drafted width), its
  verify tokens and, where the partial drafter drafted part of the batch, the rows it drafted; and
  each record lands in the one table its key names (plain steps by batch size, drafted steps by
  tokens and by batch size and width, partial steps apart).

tests/planted/policy_bugs.py plants bugs of each kind (a uniform batch verified ragged, a plain
step through the speculative rule, a ragged step filed under the batch width, a plain step filed
as a drafted one), and these tests catch them.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.runtime.block import Block
from dflash_sglang.step import ragged, verifying
from dflash_sglang.width import controller, step_times
from dflash_sglang.width.controller import ADAPTIVE_ENV, WIDTHS_ENV, VerifyWidth
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, LENGTHS_ENV, RequestLengths
from dflash_sglang.width.step_times import StepTimes

B = 8
STEPS = 400


@pytest.fixture(autouse=True)
def no_switches(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    for name in (ADAPTIVE_ENV, LENGTHS_ENV, WIDTHS_ENV, FORCED_LENGTHS_ENV):
        monkeypatch.delenv(name, raising=False)


class Load:
    """Random batches of a pool of requests, each with its own draft acceptance rate."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        rates = [0.95, 0.9, 0.7, 0.4, 0.1, 0.0]
        self.pool = [
            SimpleNamespace(rid=f"r{i}", spec_correct_drafts_histogram=[0] * B, rate=rates[i % len(rates)])
            for i in range(16)
        ]

    def batch(self):
        size = self.rng.choice([1, 2, 3, 4, 6, 8])
        reqs = self.rng.sample(self.pool, size)
        return SimpleNamespace(reqs=reqs, has_grammar=False, sampling_info=None)

    def verified(self, reqs, plan) -> None:
        """The scheduler's records (Req.update_spec_correct_drafts_histogram): each request
        accepts drafts at its rate, within the drafts it verified."""
        for i, req in enumerate(reqs):
            drafts = (plan.width if plan.lengths is None else plan.lengths[i]) - 1
            accepted = 0
            while accepted < drafts and self.rng.random() < req.rate:
                accepted += 1
            hist = req.spec_correct_drafts_histogram
            hist.extend([0] * (accepted + 1 - len(hist)))
            hist[accepted] += 1


class Clock:
    """The host clock StepTimes reads on a CPU, advanced by a modelled step cost: the policy sees
    a plain step cheaper than a drafted one and more tokens costing more, the same every run."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(step_times, "time", SimpleNamespace(perf_counter=lambda: self.now))

    def run(self, plan, batch_size: int) -> None:
        tokens = batch_size * plan.width if plan.lengths is None else sum(plan.lengths)
        drafted = batch_size if plan.drafted is None else len(plan.drafted)
        drafter = 0.0 if plan.width == 1 else 0.004 * drafted
        self.now += 0.010 + 0.002 * batch_size + 0.0004 * tokens + drafter

    def between_steps(self) -> None:
        self.now += 0.001


def policy(partial_drafter: bool) -> VerifyWidth:
    widths = VerifyWidth(
        B, default_off_because=None, ragged_off_because=None, partial_drafter=partial_drafter
    )
    assert widths.adaptive and widths.per_request
    return widths


def filed_steps(times: StepTimes, monkeypatch) -> list[tuple]:
    """Every record the policy files: (batch size, width, verify tokens, drafted rows)."""
    filed, record = [], times.record

    def spy(batch_size, width, seconds, tokens=None, drafted=None):
        filed.append((batch_size, width, tokens or batch_size * width, drafted))
        record(batch_size, width, seconds, tokens, drafted)

    monkeypatch.setattr(times, "record", spy)
    return filed


def the_shape_it_ran(plan, batch_size: int) -> tuple:
    """The key a step's time belongs under: its batch size, width and tokens; a ragged step's
    nearest whole drafted width (at least 2: it ran the drafter) and its own tokens; the rows
    drafted where the partial drafter drafted part of the batch."""
    if plan.lengths is None:
        return batch_size, plan.width, batch_size * plan.width, None
    total = sum(plan.lengths)
    drafted = None if plan.drafted is None else len(plan.drafted)
    return batch_size, max(2, round(total / batch_size)), total, drafted


def assert_the_plan_is_what_it_says(plan, batch_size: int, partial_drafter: bool) -> None:
    assert 1 <= plan.width <= B and plan.widest == (plan.width == B)
    if plan.lengths is None:
        assert plan.drafted is None
        return
    lengths = plan.lengths
    assert len(lengths) == batch_size and all(1 <= n <= B for n in lengths)
    assert min(lengths) < max(lengths), f"uniform lengths {lengths} verified ragged"
    assert plan.width == max(lengths)
    long_rows = tuple(i for i, n in enumerate(lengths) if n > 1)
    expected = long_rows if partial_drafter and len(long_rows) < batch_size else None
    assert plan.drafted == expected


class TargetRecorder:
    """Verifying with the target's forward and the rules replaced: what reached each."""

    def __init__(self, monkeypatch):
        monkeypatch.setattr(ragged, "block_kv_plan", lambda *args: None)  # no KV pool here
        monkeypatch.setattr(verifying, "adjust_verify_logits", lambda *args: None)
        worker = SimpleNamespace(model_runner=SimpleNamespace(kv_index_translator=None))
        stream = SimpleNamespace(join=lambda: None)
        self.verify = verifying.Verifying(worker, stream, None, self.rule("chain"), None, self.rule("plain"))
        monkeypatch.setattr(self.verify, "target_forward", self.target_forward)
        self.seen = {}

    def rule(self, name):
        def judge(batch, block, logits, target_out, rows):
            self.seen["rule"] = name

        return judge

    def target_forward(self, batch, block, rows=None):
        self.seen.update(tokens=block.tokens.clone(), rows=rows)
        logits = torch.zeros(block.tokens.numel(), 5)
        return SimpleNamespace(logits_output=SimpleNamespace(next_token_logits=logits, hidden_states=None))

    def __call__(self, step, plan) -> dict:
        bs, width = len(step.reqs), plan.width
        tokens = torch.arange(bs * width).view(bs, width)  # the narrowed block, distinct tokens
        kv_plan = SimpleNamespace(seq_lens_cpu=torch.full((bs,), 10))
        block = Block(tokens, torch.arange(bs * width), torch.arange(bs * width), kv_plan, tokens, plan=plan)
        self.seen.clear()
        self.verify(step, block, None)
        self.seen["block"] = tokens
        return dict(self.seen)


def assert_it_reached_the_target_as_planned(seen: dict, plan) -> None:
    block = seen["block"]
    if plan.lengths is None:
        assert seen["rows"] is None and torch.equal(seen["tokens"], block)
        assert seen["rule"] == ("plain" if plan.width == 1 else "chain")
        return
    expected = torch.cat([block[i, :n] for i, n in enumerate(plan.lengths)])
    assert seen["rows"] is not None and list(seen["rows"].lengths_cpu) == list(plan.lengths)
    assert torch.equal(seen["tokens"], expected) and seen["rule"] == "chain"


@pytest.mark.parametrize("partial_drafter", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_plan_is_what_it_says_reaches_the_target_so_and_is_filed_under_its_shape(
    partial_drafter, seed, monkeypatch
):
    widths, load, clock = policy(partial_drafter), Load(seed), Clock(monkeypatch)
    filed = filed_steps(widths.times, monkeypatch)
    target = TargetRecorder(monkeypatch)
    kinds = set()
    for _ in range(STEPS):
        step = load.batch()
        plan = widths.choose(step)
        assert_the_plan_is_what_it_says(plan, len(step.reqs), partial_drafter)
        assert_it_reached_the_target_as_planned(target(step, plan), plan)
        before = len(filed)
        clock.run(plan, len(step.reqs))
        widths.step_done(plan, step.reqs, None)
        clock.between_steps()
        assert filed[before:] == [the_shape_it_ran(plan, len(step.reqs))]
        load.verified(step.reqs, plan)
        kinds.add("plain" if plan.width == 1 else "ragged" if plan.lengths else "uniform")
        kinds.add("partial" if plan.drafted else "whole batch")
    # the load reached every kind of step (else the properties above were checked on too few)
    expected = {"plain", "ragged", "uniform", "whole batch"} | ({"partial"} if partial_drafter else set())
    assert kinds >= expected


@pytest.mark.parametrize("lengths", [(2, 1, 1, 1), (3, 1, 1, 1), (8, 1, 1, 1), (2, 2, 1, 1), (8, 8, 8, 1)])
@pytest.mark.parametrize("partial_drafter", [False, True])
def test_each_ragged_shape_is_filed_under_the_shape_it_ran(lengths, partial_drafter, monkeypatch):
    """The random load above rarely chooses a mostly plain ragged step (mean length under 1.5);
    here the policy is handed such lengths (and others) at batch 4, past its first steps, and the
    step's record must still be its own shape: never filed as a plain step (it ran the drafter)."""
    widths, _ = policy(partial_drafter), Clock(monkeypatch)
    times = widths.times
    times.add(times.plain, 4, 0.010)
    times.add(times.seconds, 16, 0.012)
    times.add(times.seconds, 32, 0.014)
    widths.ran_widest = controller.WIDEST_FIRST
    widths.probed.add(4)
    chosen = RequestLengths(lengths, 0.0, 0.0)
    monkeypatch.setattr(controller, "request_lengths", lambda *args, **kwargs: chosen)
    filed = filed_steps(times, monkeypatch)
    step = Load(0).batch()
    step.reqs = Load(0).pool[:4]
    plan = widths.choose(step)
    assert plan.lengths == lengths
    widths.step_done(plan, step.reqs, None)
    assert filed == [the_shape_it_ran(plan, 4)] and filed[0][1] >= 2


def test_forced_uniform_lengths_are_one_width():
    """The testing cycle of per-request lengths at batch 1 (or any batch whose lengths agree) is
    one width a batch too: the verify's ragged layout only where lengths differ."""
    widths = VerifyWidth(B, ragged_off_because=None)
    widths.forced_lengths = (3, 1, 8)
    for _ in range(6):
        plan = widths.choose(SimpleNamespace(reqs=[SimpleNamespace(rid="a")], has_grammar=False))
        assert plan.lengths is None and plan.width in (3, 1, 8)


@pytest.mark.parametrize(
    "key, table",
    [
        ((4, 1, 4, None), "plain"),
        ((1, 1, 1, None), "plain"),
        ((4, 8, 32, None), "drafted"),
        ((4, 2, 5, None), "drafted"),
        ((3, 2, 5, 1), "partial"),
        ((8, 3, 20, 5), "partial"),
    ],
)
def test_a_record_lands_in_the_one_table_its_key_names(key, table):
    batch_size, width, tokens, drafted = key
    times = StepTimes("cpu")
    times.record(batch_size, width, 0.01, tokens, drafted)
    landed = {
        "plain": {k: list(v) for k, v in times.plain.items()},
        "drafted": {k: list(v) for k, v in times.seconds.items()},
        "by batch": {bs: {w: list(v) for w, v in ws.items()} for bs, ws in times.by_batch.items()},
        "partial": len(times.partial.recent),
    }
    expected = {"plain": {}, "drafted": {}, "by batch": {}, "partial": 0}
    if table == "plain":
        expected["plain"] = {batch_size: [0.01]}
    elif table == "drafted":
        expected["drafted"] = {tokens: [0.01]}
        expected["by batch"] = {batch_size: {width: [0.01]}}
    else:
        expected["partial"] = 1
    assert landed == expected
