"""The Gated DeltaNet stand-ins (cpu/gated_deltanet/delta_rule.py, chunk_and_decode.py) against
transformers' pure-torch references (qwen3_5's chunked and recurrent gated delta rule), which
keep the state as [batch, HV, K, V]: SGLang's pool rows are [HV, V, K], the transpose."""

import pytest
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5.modeling_qwen3_5 import (
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

from dflash_sglang.cpu.gated_deltanet.chunk_and_decode import (
    chunk_gated_delta_rule_on_cpu,
    fused_gdn_gating_on_cpu,
    packed_decode_on_cpu,
    sigmoid_gating_delta_rule_update_on_cpu,
)
from dflash_sglang.cpu.gated_deltanet.delta_rule import gated_delta_rule

H, HV, K, V = 2, 4, 8, 8  # two value heads per key head, as in Qwen3.5
SLOTS = 6
TOL = dict(atol=2e-5, rtol=1e-4)


def fail(*args, **kwargs):
    raise AssertionError("CPU tensors must not reach SGLang's Triton kernel")


def inputs(tokens: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(tokens, H, K, generator=gen) for _ in range(2))
    v = torch.randn(tokens, HV, V, generator=gen)
    a, b = (torch.randn(tokens, HV, generator=gen) for _ in range(2))
    return q, k, v, a, b


def params(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(HV, generator=gen) * 0.5, torch.randn(HV, generator=gen)  # A_log, dt_bias


def gates_by_formula(A_log, a, b, dt_bias):
    """transformers' Qwen3_5GatedDeltaNet: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)."""
    return -A_log.exp() * F.softplus(a + dt_bias), b.sigmoid()


def pool(seed: int = 2) -> torch.Tensor:
    return torch.randn(SLOTS, HV, V, K, generator=torch.Generator().manual_seed(seed))


def reference(q, k, v, g, beta, state_vk, chunked=False):
    """transformers over one sequence ([T, ...] inputs, a [HV, V, K] state) -> (o, state [HV, V, K])."""
    run = torch_chunk_gated_delta_rule if chunked else torch_recurrent_gated_delta_rule
    q, k = (x.repeat_interleave(HV // H, 1) for x in (q, k))  # transformers expects per-value-head q, k
    o, final = run(
        q[None], k[None], v[None], g[None], beta[None], initial_state=state_vk.transpose(-1, -2)[None],
        output_final_state=True, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    return o[0], final[0].transpose(-1, -2)


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
def test_the_recurrence_equals_transformers_with_the_state_transposed(chunked):
    q, k, v, a, b = inputs(70)
    A_log, dt_bias = params()
    g, beta = gates_by_formula(A_log, a, b, dt_bias)
    state = pool()[0]
    o, final, _ = gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], state[None], K**-0.5)
    want_o, want_final = reference(q, k, v, g, beta, state, chunked)
    torch.testing.assert_close(o[0], want_o, **TOL)
    torch.testing.assert_close(final[0], want_final, **TOL)
    # The layouts really differ: the untransposed state is a different (wrong) answer.
    wrong_o, _ = torch_recurrent_gated_delta_rule(
        *(x[None] for x in (q.repeat_interleave(2, 1), k.repeat_interleave(2, 1), v, g, beta)),
        initial_state=state[None], output_final_state=True, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    assert not torch.allclose(o, wrong_o, **TOL)


def test_gating_equals_the_formula():
    A_log, dt_bias = params()
    _, _, _, a, b = inputs(5)
    g, beta = fused_gdn_gating_on_cpu(fail, A_log, a, b, dt_bias)
    want_g, want_beta = gates_by_formula(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, 5, HV) and g.dtype == beta.dtype == torch.float32
    torch.testing.assert_close(g[0], want_g)
    torch.testing.assert_close(beta[0], want_beta)


def test_chunked_prefill_packs_sequences_updates_slots_and_returns_chunk_start_states():
    lengths, slots = [5, 64, 130], [4, 1, 2]  # below, at and across the 64-token chunks
    q, k, v, a, b = inputs(sum(lengths))
    A_log, dt_bias = params()
    g, beta = gates_by_formula(A_log, a, b, dt_bias)
    states = pool()
    before = states.clone()
    cu = torch.tensor([0, 5, 69, 199], dtype=torch.int32)
    o, none, h = chunk_gated_delta_rule_on_cpu(
        fail, q[None], k[None], v[None], g[None], beta[None], initial_state=states,
        initial_state_indices=torch.tensor(slots), cu_seqlens=cu, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    assert none is None and o.shape == (1, 199, HV, V) and h.shape == (1, 1 + 1 + 3, HV, V, K)
    chunk = 0
    for (start, end), slot in zip(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True), slots, strict=True):
        seq = slice(start, end)
        want_o, want_final = reference(q[seq], k[seq], v[seq], g[seq], beta[seq], before[slot], chunked=True)
        torch.testing.assert_close(o[0, seq], want_o, **TOL)
        torch.testing.assert_close(states[slot], want_final, **TOL)
        for c in range(0, end - start, 64):  # h: the state before each chunk
            prefix = slice(start, start + c)
            _, want_h = reference(q[prefix], k[prefix], v[prefix], g[prefix], beta[prefix], before[slot])
            torch.testing.assert_close(h[0, chunk], want_h, **TOL)
            chunk += 1
    untouched = [s for s in range(SLOTS) if s not in slots]
    assert torch.equal(states[untouched], before[untouched])


def test_chunked_prefill_without_inplace_update_leaves_the_pool():
    q, k, v, a, b = inputs(9)
    A_log, dt_bias = params()
    g, beta = gates_by_formula(A_log, a, b, dt_bias)
    states = pool()
    before = states.clone()
    chunk_gated_delta_rule_on_cpu(
        fail, q[None], k[None], v[None], g[None], beta[None], initial_state=states,
        initial_state_indices=torch.tensor([3]), cu_seqlens=torch.tensor([0, 9]),
        use_qk_l2norm_in_kernel=True, inplace_update=False,
    )  # fmt: skip
    assert torch.equal(states, before)


def test_packed_decode_steps_each_row_and_skips_padding():
    q, k, v, a, b = inputs(3)
    A_log, dt_bias = params()
    states = pool()
    before = states.clone()
    slots = torch.tensor([3, -1, 0])
    mixed_qkv = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], dim=1)
    out = torch.full((3, 1, HV, V), float("nan"))
    packed_decode_on_cpu(fail, mixed_qkv, a, b, A_log, dt_bias, K**-0.5, states, out, slots, True)
    g, beta = gates_by_formula(A_log, a, b, dt_bias)
    for row, slot in ((0, 3), (2, 0)):
        one = slice(row, row + 1)
        want_o, want_final = reference(q[one], k[one], v[one], g[one], beta[one], before[slot])
        torch.testing.assert_close(out[row], want_o, **TOL)
        torch.testing.assert_close(states[slot], want_final, **TOL)
    assert not out[1].any()
    assert torch.equal(states[[1, 2, 4, 5]], before[[1, 2, 4, 5]])


def run_verify(states, buffer, block: int, slots, rows, disable_state_update=True):
    q, k, v, a, b = inputs(block * len(slots))
    A_log, dt_bias = params()
    cu = torch.arange(0, block * len(slots) + 1, block, dtype=torch.int32)
    o = sigmoid_gating_delta_rule_update_on_cpu(
        fail, A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
        q=q[None], k=k[None], v=v[None], b=b, initial_state_source=states,
        initial_state_indices=torch.tensor(slots), cu_seqlens=cu, use_qk_l2norm_in_kernel=True,
        disable_state_update=disable_state_update, intermediate_states_buffer=buffer,
        intermediate_state_indices=None if buffer is None else torch.tensor(rows), cache_steps=block,
    )  # fmt: skip
    return o, (q, k, v, *gates_by_formula(A_log, a, b, dt_bias)), cu.tolist()


def test_verify_keeps_the_state_after_every_step_and_leaves_the_live_state():
    block, slots, rows = 8, [5, 2], [1, 0]
    states = pool()
    before = states.clone()
    buffer = torch.zeros(3, block, HV, V, K)
    o, (q, k, v, g, beta), cu = run_verify(states, buffer, block, slots, rows)
    assert o.shape == (1, block * 2, HV, V)
    assert torch.equal(states, before)  # disable_state_update: rejected steps need no rollback
    for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
        seq = slice(cu[i], cu[i + 1])
        want_o, _ = reference(q[seq], k[seq], v[seq], g[seq], beta[seq], before[slot])
        torch.testing.assert_close(o[0, seq], want_o, **TOL)
        for step in range(block):  # buffer[row, step] == the state after step + 1 recurrent steps
            prefix = slice(cu[i], cu[i] + step + 1)
            _, want = reference(q[prefix], k[prefix], v[prefix], g[prefix], beta[prefix], before[slot])
            torch.testing.assert_close(buffer[row, step], want, **TOL)
    assert not buffer[2].any()


def test_decode_mode_writes_the_final_state():
    states = pool()
    before = states.clone()
    o, (q, k, v, g, beta), _ = run_verify(states, None, 1, [4, 1, 0], None, disable_state_update=False)
    for row, slot in enumerate([4, 1, 0]):
        one = slice(row, row + 1)
        want_o, want_final = reference(q[one], k[one], v[one], g[one], beta[one], before[slot])
        torch.testing.assert_close(o[0, row], want_o[0], **TOL)
        torch.testing.assert_close(states[slot], want_final, **TOL)


@pytest.mark.parametrize("mode", [{"is_kda": True}, {"cache_ring": True}])
def test_kda_and_ring_modes_refuse_on_cpu(mode):
    q, k, v, a, b = inputs(2)
    A_log, dt_bias = params()
    with pytest.raises(NotImplementedError):
        sigmoid_gating_delta_rule_update_on_cpu(
            fail, A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
            q=q[None], k=k[None], v=v[None], b=b, initial_state_source=pool(),
            initial_state_indices=torch.tensor([0]), **mode,
        )  # fmt: skip


def test_other_devices_go_to_sglang():
    meta = torch.empty(1, 2, H, K, device="meta")
    calls = []

    def original(*args, **kwargs):
        calls.append(len(args) + len(kwargs))
        return "sglang"

    assert chunk_gated_delta_rule_on_cpu(original, meta, meta, meta, meta, meta) == "sglang"
    assert (
        sigmoid_gating_delta_rule_update_on_cpu(original, *[None] * 5, meta, meta, meta, None, None, None)
        == "sglang"
    )
    assert fused_gdn_gating_on_cpu(original, None, meta, meta, None) == "sglang"
    assert packed_decode_on_cpu(original, meta, *[None] * 8) == "sglang"
    assert len(calls) == 4
