"""Rotary embedding on a host without a CUDA/ROCm rotary kernel.

`RotaryEmbedding.__init__` picks a custom kernel unless its module flags say the host is a CPU
engine. Only `SGLANG_USE_CPU_ENGINE=1` (the sgl_kernel CPU build) sets that flag, so a CUDA torch
build on a machine without a GPU falls through to `vllm._custom_ops`, which is not installed.
The torch path SGLang already has (`forward_native`, chosen by BaseFusedOp dispatch when no
platform kernel applies) needs only the constructor to skip that import.
"""

from __future__ import annotations

from contextlib import contextmanager

TARGET = "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.__init__"


def needs_torch_rotary(base_module) -> bool:
    """True where the constructor would reach for vllm: neither CUDA nor ROCm detected."""
    return not (base_module._is_cuda or base_module._is_hip)


@contextmanager
def host_reads_as_cpu(base_module):
    """Within the block, the module sees the host as a CPU engine (its `_is_cpu` flag)."""
    saved = base_module._is_cpu
    base_module._is_cpu = True
    try:
        yield
    finally:
        base_module._is_cpu = saved


def rotary_init_without_vllm(original, rotary, *args, **kwargs):
    """AROUND RotaryEmbedding.__init__: on a host without CUDA/ROCm, keep the torch path."""
    from sglang.srt.layers.rotary_embedding import base

    if not needs_torch_rotary(base):
        return original(rotary, *args, **kwargs)
    with host_reads_as_cpu(base):
        return original(rotary, *args, **kwargs)
