"""A ranking that chose plain decoding holds for a few steps (width/plain_hold.py): for the same
requests only, never past HELD_STEPS or the next exploring step, and a policy with it takes the
same steps as one without it where drafts do not fit: as many exploring steps, as many plain."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from dflash_sglang.width import controller, plain_hold
from dflash_sglang.width.controller import VerifyWidth
from dflash_sglang.width.plain_hold import HELD_STEPS, PlainHold
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, LENGTHS_ENV

BLOCK = 8


def reqs(*rids):
    return [SimpleNamespace(rid=rid) for rid in rids]


def test_a_plain_ranking_holds_for_its_requests_until_it_lapses():
    hold = PlainHold()
    hold.hold(reqs("a", "b"), step=10)
    assert hold.holds(reqs("a", "b"), 11, next_explore=100)
    assert hold.holds(reqs("a", "b"), 10 + HELD_STEPS - 1, next_explore=100)
    assert not hold.holds(reqs("a", "b"), 10 + HELD_STEPS, next_explore=100)  # lapsed
    assert not hold.holds(reqs("a", "b"), 12, next_explore=12)  # the exploring step comes
    assert not hold.holds(reqs("a", "c"), 11, next_explore=100)  # another request joined
    assert not hold.holds(reqs("b", "a"), 11, next_explore=100)  # the rows moved
    assert not hold.holds(reqs("a"), 11, next_explore=100)  # one left
    hold.release()
    assert not hold.holds(reqs("a", "b"), 11, next_explore=100)
    assert hold.used == 2


@pytest.fixture(autouse=True)
def no_switches(monkeypatch):
    """The adaptive width as a server gets it by default: none of its switches set."""
    for name in (controller.ADAPTIVE_ENV, controller.WIDTHS_ENV, LENGTHS_ENV, FORCED_LENGTHS_ENV):
        monkeypatch.delenv(name, raising=False)


def simulate(monkeypatch, held_steps: int, steps: int = 1500, batch: int = 4, fits: float = 0.05, seed=0):
    """The adaptive width over a load whose drafts rarely fit (each draft accepted with `fits`),
    plain steps 5 ms and drafted ones 11 ms: the widths it ran, and the steps a hold answered."""
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)  # no SGLang config here
    monkeypatch.setattr(plain_hold, "HELD_STEPS", held_steps)
    rng = random.Random(seed)
    policy = VerifyWidth(BLOCK, default_off_because=None, ragged_off_because=None)
    sampled = SimpleNamespace(top_k=50)
    requests = [
        SimpleNamespace(rid=f"r{i}", sampling_params=sampled, spec_correct_drafts_histogram=[0] * BLOCK)
        for i in range(batch)
    ]
    ran = []
    for _ in range(steps):
        plan = policy.choose(SimpleNamespace(reqs=requests))
        for i, req in enumerate(requests):
            width = plan.width if plan.lengths is None else plan.lengths[i]
            accepted = 0
            while accepted < width - 1 and rng.random() < fits:
                accepted += 1
            req.spec_correct_drafts_histogram[accepted] += 1
        if policy.step_started is not None:  # the step's time, as if it took that long
            key, _ = policy.step_started
            policy.times.record(key[0], key[1], 0.005 if plan.width == 1 else 0.011, key[2], key[3])
            policy.step_started = None
        ran.append(plan.width)
    return ran, policy.plain_hold.used


@pytest.mark.parametrize("seed", range(3))
def test_where_drafts_rarely_fit_the_hold_changes_no_step_only_what_it_costs(monkeypatch, seed):
    without, used_without = simulate(monkeypatch, held_steps=0, seed=seed)
    held, used = simulate(monkeypatch, held_steps=HELD_STEPS, seed=seed)
    assert used_without == 0
    assert used > len(held) // 2  # most steps reuse a ranking
    settled = slice(len(held) // 3, None)  # after the first burst's probing
    drafted_without = sum(w > 1 for w in without[settled])
    drafted = sum(w > 1 for w in held[settled])
    assert drafted_without > 0  # the controller still explores
    assert abs(drafted - drafted_without) <= max(2, drafted_without // 4)  # on its own schedule
    assert held[settled].count(1) >= 0.9 * len(held[settled])
