"""The benchmarking switches that force acceptance (sampling/simulated_acceptance.py)."""

import pytest
import torch

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.sampling.simulated_acceptance import FIXED_TOKEN, PROFILE_ENV, SimulatedAcceptance
from dflash_sglang.tree.switches import TreeSettings

BLOCK = 8


def simulated(monkeypatch, **env) -> SimulatedAcceptance | None:
    for name in (PROFILE_ENV, "SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_TOKEN_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return SimulatedAcceptance.for_worker(None, BLOCK, "cpu")


def block_and_target(bs: int, width: int):
    torch.manual_seed(0)
    return torch.randint(0, 1000, (bs, width)), torch.randint(1000, 2000, (bs, width))


def test_off_without_either_switch(monkeypatch):
    assert simulated(monkeypatch) is None


def test_profile_cuts_after_accepted_drafts_with_the_targets_token(monkeypatch):
    sim = simulated(monkeypatch, **{PROFILE_ENV: "1,1,0"})
    block, target = block_and_target(5, BLOCK)
    out = sim.accept(block, target)
    assert out.lengths.tolist() == [3] * 5  # two drafts, then the target's token
    assert torch.equal(out.tokens[:, :2], block[:, 1:3])
    assert torch.equal(out.tokens[:, 2], target[:, 2])


def test_a_narrow_step_commits_at_most_its_width(monkeypatch):
    sim = simulated(monkeypatch, **{PROFILE_ENV: "1"})
    for width in (1, 2, 5, BLOCK):
        block, target = block_and_target(3, width)
        out = sim.accept(block, target)
        assert out.lengths.tolist() == [width] * 3
        assert torch.equal(out.tokens[:, : width - 1], block[:, 1:])
        assert torch.equal(out.tokens[:, width - 1], target[:, width - 1])  # the bonus


def test_profile_rates_are_the_conditional_acceptance_per_position(monkeypatch):
    rates = [0.95, 0.8, 0.7]  # the last one repeats
    sim = simulated(monkeypatch, **{PROFILE_ENV: ",".join(map(str, rates))})
    torch.manual_seed(1)
    block, target = block_and_target(40_000, BLOCK)
    accepted = sim.accept(block, target).lengths - 1
    full = rates + [rates[-1]] * (BLOCK - 1 - len(rates))
    for k, rate in enumerate(full, start=1):
        reached = (accepted >= k - 1).sum().item()
        passed = (accepted >= k).sum().item()
        assert reached > 300, "too few rows reach this position for the check"
        assert abs(passed / reached - rate) < 4 * (rate * (1 - rate) / reached) ** 0.5 + 1e-9, k


def test_sglang_length_knob_real_tokens(monkeypatch):
    sim = simulated(
        monkeypatch, SGLANG_SIMULATE_ACC_LEN="3", SGLANG_SIMULATE_ACC_TOKEN_MODE="real-draft-token"
    )
    block, target = block_and_target(4, BLOCK)
    out = sim.accept(block, target)
    assert out.lengths.tolist() == [3] * 4  # an integer length is drawn exactly
    assert torch.equal(out.tokens[:, :2], block[:, 1:3]) and torch.equal(out.tokens[:, 2], target[:, 2])
    narrow = sim.accept(*block_and_target(4, 2))
    assert narrow.lengths.tolist() == [2] * 4  # clamped to the step's width, as SGLang clamps


def test_sglang_length_knob_fixed_tokens_by_default(monkeypatch):
    sim = simulated(monkeypatch, SGLANG_SIMULATE_ACC_LEN="2")
    out = sim.accept(*block_and_target(2, BLOCK))
    assert out.lengths.tolist() == [2, 2] and bool((out.tokens == FIXED_TOKEN).all())


@pytest.mark.parametrize("env, field", [
    ({PROFILE_ENV: "0.9,x"}, PROFILE_ENV),
    ({PROFILE_ENV: "1.5"}, PROFILE_ENV),
    ({PROFILE_ENV: "0.8", "SGLANG_SIMULATE_ACC_LEN": "3"}, "set one of the two"),
    ({"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "x"}, "ACC_TOKEN_MODE"),
])  # fmt: skip
def test_bad_settings_fail_naming_the_switch(monkeypatch, env, field):
    with pytest.raises(DFlashConfigError, match=field):
        simulated(monkeypatch, **env)


def test_trees_are_refused(monkeypatch):
    simulated(monkeypatch)
    monkeypatch.setenv(PROFILE_ENV, "0.8")
    with pytest.raises(DFlashConfigError, match="eagle-topk 4"):
        SimulatedAcceptance.for_worker(TreeSettings(width=16, max_children=4), BLOCK, "cpu")


def test_the_verify_phase_calls_the_simulated_rule_as_it_calls_the_others(monkeypatch):
    """step/verifying.Verifying calls its rule with the per-request rows (None where the step is
    uniform); the simulated rule took one argument fewer, and `make bench-adaptive` servers failed
    at their first verify (2026-11-27)."""
    from types import SimpleNamespace

    from dflash_sglang.step.verifying import SimulatedRule

    sim = simulated(monkeypatch, **{PROFILE_ENV: "1,0"}).placed(BLOCK, "cpu")
    block, target = block_and_target(2, BLOCK)
    logits = torch.nn.functional.one_hot(target.flatten(), 2000).float()
    batch = SimpleNamespace(sampling_info=None)
    one_rank = SimpleNamespace(accepted=lambda accepted, greedy: accepted)  # rank 0's is its own
    verified = SimulatedRule(one_rank, sim)(batch, SimpleNamespace(tokens=block), logits, "out", None)
    assert verified.accepted.lengths.tolist() == [2, 2] and verified.target_out == "out"
