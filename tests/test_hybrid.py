"""Which verify step's recurrent state lands in the radix track slot (the state at the last track
boundary the committed tokens reach, found from the post-verify length), and the startup check
that names the options when a hybrid DFLASH setup cannot speculate."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.admission.startup_checks import explain
from dflash_sglang.step.hybrid import NO_TRACK, track_steps


def tracked_step_by_enumeration(pre: int, accepted: int, grid: int) -> int:
    """Step i holds the state of length pre + i + 1; keep the last accepted one on a boundary."""
    on_boundary = [i for i in range(accepted) if (pre + i + 1) % grid == 0]
    return on_boundary[-1] if on_boundary else NO_TRACK


def test_worked_example_from_docs_hybrid():
    pre = torch.tensor([6, 6, 7, 4, 2])
    accepted = torch.tensor([4, 1, 1, 3, 9])
    steps = track_steps(pre, pre + accepted, accepted, grid=4)
    # 6+4=10 crosses 8 at step 1; 6+1 crosses nothing; 7+1=8 is a boundary at step 0;
    # 4+3=7 stays in [4, 8); 2+9=11 crosses 4 and 8, the last (8) at step 5.
    assert steps.tolist() == [1, NO_TRACK, 0, NO_TRACK, 5]


def test_matches_enumeration_on_random_steps():
    rng = random.Random(0)
    for grid in (1, 2, 4, 8, 64):
        cases = [(rng.randrange(0, 300), rng.randrange(1, 17)) for _ in range(300)]
        pre = torch.tensor([p for p, _ in cases])
        accepted = torch.tensor([a for _, a in cases])
        got = track_steps(pre, pre + accepted, accepted, grid).tolist()
        assert got == [tracked_step_by_enumeration(p, a, grid) for p, a in cases]


def strategy_view(**changes):
    fields = dict(speculative_algorithm="DFLASH", uses_mamba_radix_cache=True, speculative_num_draft_tokens=8,
                  mamba_radix_cache_strategy="extra_buffer", mamba_track_interval=64,
                  disable_overlap_schedule=True)  # fmt: skip
    return SimpleNamespace(**{**fields, **changes})


def test_startup_checks_explain_only_dflash_settings_that_cannot_speculate():
    assert explain(strategy_view()) is None
    assert "--mamba-track-interval 4" in explain(strategy_view(mamba_track_interval=4))
    assert explain(strategy_view(mamba_track_interval=4, speculative_algorithm="EAGLE")) is None
    assert explain(strategy_view(mamba_track_interval=4, uses_mamba_radix_cache=False)) is None
    no_buffer = strategy_view(mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=False)
    assert "SGLANG_ENABLE_SPEC_V2" in explain(no_buffer)
    assert explain(strategy_view(mamba_radix_cache_strategy="no_buffer")) is None


# ---- the ReplaySSM ring: when it serves, and what a request holds (step/replay_choice.py) --------


def replay_cfg(**fields):
    base = dict(speculative_eagle_topk=None, disaggregation_mode="null", enable_linear_replayssm=False,
                linear_attn_decode_backend=None, linear_attn_backend="triton")  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_the_ring_serves_gdn_chains_and_says_why_not_elsewhere():
    from sglang.srt.configs.qwen3_5 import Qwen3_5TextConfig  # as SGLang loads a Qwen3.5 target
    from transformers import Qwen3Config

    from dflash_sglang.step.replay_choice import replay_off_because

    gdn = Qwen3_5TextConfig()
    assert replay_off_because(replay_cfg(), gdn) is None
    assert "Gated DeltaNet" in replay_off_because(replay_cfg(), Qwen3Config())
    assert replay_off_because(replay_cfg(speculative_eagle_topk=4), gdn) is None  # trees: tree/replay_ring.py
    assert "PD" in replay_off_because(replay_cfg(disaggregation_mode="decode"), gdn)
    assert "decode step" in replay_off_because(replay_cfg(enable_linear_replayssm=True), gdn)
    assert "cutedsl" in replay_off_because(replay_cfg(linear_attn_decode_backend="cutedsl"), gdn)


def test_the_ring_is_the_default_wherever_it_serves_and_as_fast_and_asked_for_elsewhere(monkeypatch):
    """Issue 65 item 1: unset, the ring on CUDA (SGLang's ring kernels, our tree replay's) for
    chains and trees, on CPU for chains (a tree's replay is slower there than a state per node),
    wherever it can serve; 1 and 0 force either way; what the ring cannot serve is refused only
    where it was asked for."""
    from sglang.srt.configs.qwen3_5 import Qwen3_5TextConfig
    from transformers import Qwen3Config

    from dflash_sglang.admission import replay_ssm
    from dflash_sglang.errors import DFlashConfigError
    from dflash_sglang.step.replay_choice import REPLAY_ENV, ring_by_default, scratch_words

    gdn = Qwen3_5TextConfig()
    assert ring_by_default(replay_cfg(device="cuda"), gdn, trees=False)
    assert ring_by_default(replay_cfg(device="cuda"), gdn, trees=True)
    assert ring_by_default(replay_cfg(device="cpu"), gdn, trees=False)
    assert not ring_by_default(replay_cfg(device="cpu"), gdn, trees=True)
    assert not ring_by_default(replay_cfg(device="npu"), gdn, trees=False)  # SGLang's kernels unproven there
    assert not ring_by_default(replay_cfg(device="cuda"), Qwen3Config(), trees=False)  # not Gated DeltaNet
    assert not ring_by_default(replay_cfg(device="cpu", disaggregation_mode="decode"), gdn, trees=False)

    declared = []
    monkeypatch.setattr("sglang.srt.arg_groups.overrides.resolving_view", lambda args: args)
    monkeypatch.setattr(
        "sglang.srt.arg_groups.overrides.declare_resolution",
        lambda args, source, **fields: declared.append(fields),
    )

    def resolve(env: str, topk=None, **fields) -> bool:
        monkeypatch.setenv(REPLAY_ENV, env)
        declared.clear()
        cfg = replay_cfg(speculative_algorithm="DFLASH", enable_linear_replayssm_spec=False, **fields)
        cfg._raw_input = {} if topk is None else {"speculative_eagle_topk": topk}  # the operator's K
        replay_ssm.replay_when_asked(cfg, gdn)
        return declared == [{"enable_linear_replayssm_spec": True}]

    assert resolve("", device="cuda") and resolve("", device="cpu")
    assert resolve("1", device="npu") and not resolve("0", device="cuda") and not resolve("0", device="cpu")
    assert resolve("", topk=4, device="cuda")  # a tree too (tree/replay_ring.py)
    assert resolve("1", topk=4, device="cpu") and not resolve("", topk=4, device="cpu")
    assert not resolve("", device="cpu", disaggregation_mode="decode")  # the default only where it serves
    with pytest.raises(DFlashConfigError, match="PD"):
        resolve("1", device="cuda", disaggregation_mode="decode")  # asked for where it cannot serve: named
    monkeypatch.setenv(REPLAY_ENV, "")
    assert "the default for a chain on npu" in scratch_words(False, False, replay_cfg(device="npu"), gdn)
    assert scratch_words(False, True, replay_cfg(device="cpu"), gdn).startswith(
        "a state per tree node (the default for a tree on cpu"
    )
    assert "a record per tree node" in scratch_words(True, True, replay_cfg(device="cuda"), gdn)
    monkeypatch.setenv(REPLAY_ENV, "0")
    assert f"({REPLAY_ENV}=0)" in scratch_words(False, False, replay_cfg(device="cuda"), gdn)


def test_the_switch_takes_the_same_words_as_the_others(monkeypatch):
    import pytest

    from dflash_sglang.errors import DFlashConfigError
    from dflash_sglang.step.replay_choice import REPLAY_ENV, replay_switch

    for text, want in (("", None), ("1", True), ("on", True), ("0", False), ("off", False)):
        monkeypatch.setenv(REPLAY_ENV, text)
        assert replay_switch() is want, text
    monkeypatch.setenv(REPLAY_ENV, "ring")
    with pytest.raises(DFlashConfigError, match=REPLAY_ENV):
        replay_switch()


def test_a_requests_recurrent_memory_and_when_slots_bound_the_requests():
    from dflash_sglang.step.recurrent_memory import RecurrentMemory

    kib = 1024
    memory = RecurrentMemory(state_per_slot=57 * kib, scratch_per_request=414 * kib, slots_per_request=4,
                             mamba_slots=64, running_requests=16, requested=48, scratch_kind="x")  # fmt: skip
    assert memory.per_request == (4 * 57 + 414) * kib
    assert memory.per_request_without_speculation == 4 * 57 * kib
    assert memory.requests_the_slots_allow == 16 and memory.slots_bound_the_requests
    assert memory.slot_ratio == (57 + 414) / 57
    words = memory.describe()
    assert "of a request slot 471.0 KiB under DFLASH" in words
    assert "57.0 KiB without speculation (8.26x)" in words
    assert "holds 4 mamba slot(s) and its scratch, 642.0 KiB (228.0 KiB without speculation)" in words
    roomy = RecurrentMemory(57 * kib, 0, 4, 256, 48, 48, "x")  # KV (or the request) binds, not slots
    assert not roomy.slots_bound_the_requests
