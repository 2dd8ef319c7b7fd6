"""Let a `--device cpu` server use the extra_buffer mamba radix cache.

extra_buffer (what `--mamba-radix-cache-strategy auto` picks with the overlap scheduler on) keeps
snapshots of the linear-attention state in extra "track" slots so the radix cache can reuse them.
Two things stop it on CPU, neither about the computation (the snapshot copies are torch stand-ins,
see mamba_state.py): `ScheduleBatch.prepare_for_decode` pins the track mask (no_accelerator.py),
and `validate_mamba_extra_buffer` asserts a platform whitelist (CUDA, MUSA, NPU, HIP, XPU). For a
cpu server the hook answers the platform question with yes while the original validates everything
else (track interval vs draft tokens and page size, chunk size).
"""

from __future__ import annotations

from contextvars import ContextVar

VALIDATE_TARGET = "sglang.srt.arg_groups.mamba_hook.validate_mamba_extra_buffer"
PLATFORM_TARGET = "sglang.srt.arg_groups.mamba_hook._platform_supports_mamba_cache_extra_buffer"

# Set while `validate_mamba_extra_buffer` checks a cpu server.
_validating_cpu_server: ContextVar[bool] = ContextVar("validating_cpu_server", default=False)


def validate_extra_buffer_on_cpu(original, view, hf_config, *, mamba_cache_chunk_size_of):
    """AROUND validate_mamba_extra_buffer: on cpu, everything but the platform whitelist."""
    if view.device != "cpu":
        return original(view, hf_config, mamba_cache_chunk_size_of=mamba_cache_chunk_size_of)
    token = _validating_cpu_server.set(True)
    try:
        return original(view, hf_config, mamba_cache_chunk_size_of=mamba_cache_chunk_size_of)
    finally:
        _validating_cpu_server.reset(token)


def platform_supports_extra_buffer_on_cpu(original):
    """AROUND _platform_supports_mamba_cache_extra_buffer: yes inside a cpu server's validation."""
    return True if _validating_cpu_server.get() else original()
