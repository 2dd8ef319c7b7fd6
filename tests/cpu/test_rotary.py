"""Rotary embedding on a host without CUDA/ROCm (cpu/kernels/rotary.py): SGLang's constructor would
import vllm; with the hook it keeps the torch path, which must compute neox RoPE exactly."""

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.rotary_embedding import base
from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

from dflash_sglang.cpu.kernels.rotary import needs_torch_rotary, rotary_init_without_vllm

HEAD, THETA = 16, 10000.0
ARGS = dict(
    head_size=HEAD, rotary_dim=HEAD, max_position_embeddings=64, base=THETA, is_neox_style=True,
    dtype=torch.float32,
)  # fmt: skip


def original_init():
    init = RotaryEmbedding.__init__
    return getattr(init, "__wrapped__", init)


def reference_neox(x, positions):
    """[tokens, heads, HEAD] rotated by position: the halves form (real, imaginary) pairs."""
    inv_freq = 1.0 / THETA ** (torch.arange(0, HEAD, 2, dtype=torch.float64) / HEAD)
    angle = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    x1, x2 = x.double()[..., : HEAD // 2], x.double()[..., HEAD // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def test_this_host_needs_the_stand_in():
    assert needs_torch_rotary(base)
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        original_init()(RotaryEmbedding.__new__(RotaryEmbedding), **ARGS)


def test_constructed_rope_computes_neox_rotation():
    rope = RotaryEmbedding.__new__(RotaryEmbedding)
    rotary_init_without_vllm(original_init(), rope, **ARGS)
    assert base._is_cpu is False  # the flag is restored after construction
    positions = torch.tensor([0, 1, 5, 17, 63])
    q = torch.randn(5, 4 * HEAD)
    k = torch.randn(5, 2 * HEAD)

    q_out, k_out = rope(positions, q.clone(), k.clone())

    want_q = reference_neox(q.view(5, 4, HEAD), positions).view(5, -1)
    want_k = reference_neox(k.view(5, 2, HEAD), positions).view(5, -1)
    torch.testing.assert_close(q_out.double(), want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_out.double(), want_k, rtol=1e-5, atol=1e-5)


def test_cuda_or_rocm_hosts_keep_sglang_constructor():
    assert not needs_torch_rotary(SimpleNamespace(_is_cuda=True, _is_hip=False))
    assert not needs_torch_rotary(SimpleNamespace(_is_cuda=False, _is_hip=True))
