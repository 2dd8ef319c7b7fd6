"""The elementwise Triton kernels of SGLang's Qwen3.5 layers, on CPU tensors.

- fused_qkvzba_split_reshape_cat_contiguous (linear-attention input): the fused projections
  qkvz = [q | k | v | z] and ba = [b | a] are plain concatenations in Qwen3.5 checkpoints, so the
  split is slicing: SGLang's own `qwen3_5_gdn_prefill_projection_views`, copied to fresh contiguous
  tensors as the kernel returns;
- layernorm_gated.RMSNorm.forward (linear-attention output): RMS norm per group of the features,
  times the weight, gated by act(z) after the norm (or before it, when `norm_before_gate` is off),
  act = silu ("swish") or sigmoid;
- fused_sigmoid_mul (full-attention output gate): attn * sigmoid(gate), gate possibly a strided
  [tokens, heads, head_dim] view of the same numbers;
- _launch_fused_gate_sigmoid_mul (the MoE layers' shared-expert gate, Qwen3.5-MoE and Qwen2-MoE
  style): sigmoid(hidden . gate_weight) per token, times the shared expert's output, optionally
  added to the routed experts' output.
All compute in float32 and round once to the input's dtype, as the kernels do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SPLIT_TARGET = "sglang.kernels.ops.attention.triton_gdn_fused_proj.fused_qkvzba_split_reshape_cat_contiguous"
GATED_NORM_TARGET = "sglang.kernels.ops.attention.fla.layernorm_gated.RMSNorm.forward"
SIGMOID_MUL_TARGET = "sglang.kernels.ops.elementwise.elementwise.fused_sigmoid_mul"
SHARED_GATE_TARGET = "sglang.kernels.ops.elementwise.elementwise._launch_fused_gate_sigmoid_mul"


def split_qkvzba_on_cpu(original, mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v):
    """AROUND fused_qkvzba_split_reshape_cat_contiguous -> (mixed_qkv, z, b, a), contiguous."""
    if not mixed_qkvz.is_cpu:
        return original(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)
    from sglang.kernels.ops.attention.triton_gdn_fused_proj import qwen3_5_gdn_prefill_projection_views

    views = qwen3_5_gdn_prefill_projection_views(
        mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v
    )
    return tuple(view.contiguous() for view in views)


def gate_activation(z: torch.Tensor, activation: str) -> torch.Tensor | None:
    if activation in ("swish", "silu"):
        return F.silu(z)
    if activation == "sigmoid":
        return torch.sigmoid(z)
    return None  # the kernel applies no gate for other names


def gated_rms_norm(x, weight, bias, z, eps, group_size=None, norm_before_gate=True, activation="swish"):
    """norm(x) * act(z) (or norm(x * act(z))), RMS over groups of `group_size` features."""
    dtype, y = x.dtype, x.float()
    gate = None if z is None else gate_activation(z.reshape(x.shape).float(), activation)
    if gate is not None and not norm_before_gate:
        y = y * gate
    groups = y.unflatten(-1, (-1, group_size or y.shape[-1]))
    y = (groups * torch.rsqrt(groups.square().mean(-1, keepdim=True) + eps)).flatten(-2) * weight.float()
    if bias is not None:
        y = y + bias.float()
    if gate is not None and norm_before_gate:
        y = y * gate
    return y.to(dtype)


def gated_rms_norm_forward_on_cpu(original, norm, x, z=None):
    """AROUND RMSNorm.forward (the gated norm of `fla/layernorm_gated.py`)."""
    if not x.is_cpu:
        return original(norm, x, z)
    return gated_rms_norm(
        x, norm.weight, norm.bias, z, norm.eps, norm.group_size, norm.norm_before_gate, norm.activation
    )


def sigmoid_mul_on_cpu(original, attn_output, gate, inplace=False, quant=False):
    """AROUND fused_sigmoid_mul: attn_output * sigmoid(gate) (into attn_output when inplace)."""
    if not attn_output.is_cpu:
        return original(attn_output, gate, inplace=inplace, quant=quant)
    if quant:
        raise NotImplementedError("the FP8-quantizing sigmoid gate is not covered on CPU")
    result = (attn_output.float() * torch.sigmoid(gate.reshape(attn_output.shape).float())).to(
        attn_output.dtype
    )
    return attn_output.copy_(result) if inplace else result


def shared_expert_gate_on_cpu(original, hidden_states, gate_weight, shared_output, output, *, do_add):
    """AROUND _launch_fused_gate_sigmoid_mul: output = sigmoid(h . w) * shared (+ output)."""
    if not hidden_states.is_cpu:
        return original(hidden_states, gate_weight, shared_output, output, do_add=do_add)
    gate = torch.sigmoid((hidden_states.float() * gate_weight.float()).sum(-1, keepdim=True))
    result = gate * shared_output.float()
    if do_add:
        result = result + output.float()
    output.copy_(result)
