"""The Qwen3.5 elementwise stand-ins (cpu/gated_deltanet/elementwise.py): the projection split against
per-head slicing of the checkpoint layout, the gated RMSNorm against transformers'
Qwen3_5RMSNormGated and a per-row formula, the output gate against attn * sigmoid(gate), the
shared-expert gate against transformers' Qwen3.5-MoE block (sigmoid(gate(h)) * shared(h))."""

import pytest
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNormGated

from dflash_sglang.cpu.gated_deltanet.elementwise import (
    gated_rms_norm_forward_on_cpu,
    shared_expert_gate_on_cpu,
    sigmoid_mul_on_cpu,
    split_qkvzba_on_cpu,
)

H, HV, K, V, TOKENS = 2, 4, 8, 8, 5


def fail(*args, **kwargs):
    raise AssertionError("CPU tensors must not reach SGLang's Triton kernel")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_split_follows_the_concatenated_checkpoint_layout():
    qkvz, ba = rand(TOKENS, 2 * H * K + 2 * HV * V), rand(TOKENS, 2 * HV, seed=1)
    mixed_qkv, z, b, a = split_qkvzba_on_cpu(fail, qkvz, ba, H, HV, K, V)
    q_end, k_end, v_end = H * K, 2 * H * K, 2 * H * K + HV * V
    assert torch.equal(mixed_qkv, qkvz[:, :v_end])
    for head in range(HV):
        assert torch.equal(z[:, head], qkvz[:, v_end + head * V : v_end + (head + 1) * V])
        assert torch.equal(b[:, head], ba[:, head]) and torch.equal(a[:, head], ba[:, HV + head])
    assert torch.equal(mixed_qkv[:, q_end:k_end], qkvz[:, q_end:k_end])
    assert all(t.is_contiguous() for t in (mixed_qkv, z, b, a))
    assert z.shape == (TOKENS, HV, V)


def sglang_norm(weight, group_size=None, norm_before_gate=True, activation="swish"):
    """SGLang's own gated RMSNorm module (the hook reads its attributes), with `weight`."""
    from sglang.kernels.ops.attention.fla.layernorm_gated import RMSNorm

    norm = RMSNorm(len(weight), eps=1e-6, group_size=group_size, norm_before_gate=norm_before_gate)
    norm.activation = activation
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm


def test_gated_norm_equals_transformers_with_a_per_head_gate():
    x, z = rand(TOKENS * HV, V), rand(TOKENS, HV, V, seed=1)  # z as the layer passes it
    reference = Qwen3_5RMSNormGated(V, eps=1e-6)
    with torch.no_grad():
        reference.weight.copy_(rand(V, seed=2))
    with torch.no_grad():
        out = gated_rms_norm_forward_on_cpu(fail, sglang_norm(reference.weight.detach()), x, z)
        torch.testing.assert_close(out, reference(x, z.reshape(x.shape)))


@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("activation", ["swish", "sigmoid"])
def test_gated_norm_groups_and_gate_order(norm_before_gate, activation):
    x, z, weight = rand(3, 8), rand(3, 8, seed=1), rand(8, seed=2)
    with torch.no_grad():
        out = gated_rms_norm_forward_on_cpu(fail, sglang_norm(weight, 4, norm_before_gate, activation), x, z)
    act = torch.sigmoid(z) * (z if activation == "swish" else 1)
    for row in range(3):
        for group in (slice(0, 4), slice(4, 8)):
            xs = x[row, group] * (1 if norm_before_gate else act[row, group])
            y = xs / torch.sqrt(xs.square().mean() + 1e-6) * weight[group]
            want = y * (act[row, group] if norm_before_gate else 1)
            torch.testing.assert_close(out[row, group], want)


def test_sigmoid_gate_reads_a_strided_per_head_gate_and_writes_in_place():
    attn = rand(TOKENS, 4 * 8)
    q_gate = rand(TOKENS, 4, 2 * 8, seed=1)
    gate = q_gate[..., 8:]  # the layer's strided view
    want = attn * torch.sigmoid(gate.reshape(TOKENS, -1))
    torch.testing.assert_close(sigmoid_mul_on_cpu(fail, attn.clone(), gate), want)
    out = sigmoid_mul_on_cpu(fail, attn, gate, inplace=True)
    assert out is attn
    torch.testing.assert_close(attn, want)


@pytest.mark.parametrize("do_add", [False, True])
def test_shared_expert_gate_matches_the_per_token_sigmoid_of_a_linear_gate(do_add):
    hidden, shared, routed = rand(TOKENS, 16), rand(TOKENS, 16, seed=1), rand(TOKENS, 16, seed=2)
    gate = torch.nn.Linear(16, 1, bias=False)  # transformers' shared_expert_gate
    with torch.no_grad():
        gate.weight.copy_(rand(1, 16, seed=3))
        want = torch.sigmoid(gate(hidden)) * shared + (routed if do_add else 0)
    out = routed.clone()
    shared_expert_gate_on_cpu(fail, hidden, gate.weight.detach().view(-1), shared, out, do_add=do_add)
    torch.testing.assert_close(out, want)


def test_other_devices_go_to_sglang():
    meta = torch.empty(2, 4, device="meta")

    def original(*args, **kwargs):
        return "sglang"

    assert split_qkvzba_on_cpu(original, meta, meta, 1, 1, 1, 1) == "sglang"
    assert gated_rms_norm_forward_on_cpu(original, None, meta) == "sglang"
    assert sigmoid_mul_on_cpu(original, meta, meta) == "sglang"
    assert shared_expert_gate_on_cpu(original, meta, meta, meta, meta, do_add=True) == "sglang"
