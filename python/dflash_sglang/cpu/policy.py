"""Platform policy: let a `--device cpu` server run DFLASH with a torch_native draft.

SGLang refuses DFLASH unless the device is CUDA, NPU or XPU, and its draft-backend whitelists
lack torch_native, so a cpu draft would fall back to FlashInfer, which cannot load. The refusal is
the only device-specific step of `_handle_dflash`; the rest (block size, topk, draft backend,
max running requests) is resolution we want unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

HANDLE_DFLASH = "sglang.srt.arg_groups.speculative_hook._handle_dflash"
RESOLVE_DRAFT_BACKEND = "sglang.srt.arg_groups.speculative_hook._resolve_dflash_draft_attention_backend"
DRAFT_WORKER_BACKEND = "sglang.srt.speculative.draft_worker_common.resolve_draft_worker_attention_backend"

CPU_DRAFT_BACKEND = "torch_native"
SOURCE = "dflash_sglang.cpu.policy"

# Set while `_handle_dflash` resolves a cpu server (the device reads as cuda inside it).
_resolving_dflash_on_cpu: ContextVar[bool] = ContextVar("resolving_dflash_on_cpu", default=False)


def draft_backend_for_cpu(requested: str | None) -> str | None:
    """torch_native when the operator asked for it or for nothing; None: leave it to SGLang."""
    return CPU_DRAFT_BACKEND if requested in (None, CPU_DRAFT_BACKEND) else None


@contextmanager
def device_declared_as(server_args, device: str):
    """A temporary resolution declaration of `device`, removed again on exit."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    declare_resolution(server_args, SOURCE, device=device)
    entry = server_args._resolved_overrides[-1]
    try:
        yield
    finally:
        server_args._resolved_overrides.remove(entry)


def allow_dflash_on_cpu(original, server_args):
    """AROUND _handle_dflash: on cpu, pass the platform check and resolve everything else."""
    from sglang.srt.arg_groups.overrides import resolving_view

    if resolving_view(server_args).device != "cpu":
        return original(server_args)
    token = _resolving_dflash_on_cpu.set(True)
    try:
        with device_declared_as(server_args, "cuda"):
            return original(server_args)
    finally:
        _resolving_dflash_on_cpu.reset(token)


def keep_torch_native_draft_on_cpu(original, server_args):
    """AROUND _resolve_dflash_draft_attention_backend: keep torch_native for a cpu draft."""
    from sglang.srt.arg_groups.overrides import (
        attention_backends_of,
        declare_resolution,
        resolved_view,
        resolving_view,
    )

    if not _resolving_dflash_on_cpu.get():
        return original(server_args)
    requested = resolving_view(server_args).speculative_draft_attention_backend
    if requested is None:
        requested, _ = attention_backends_of(resolved_view(server_args))
    backend = draft_backend_for_cpu(requested)
    if backend is None:
        return original(server_args)
    declare_resolution(server_args, SOURCE, speculative_draft_attention_backend=backend)


def draft_worker_backend_on_cpu(original, *args, **kwargs):
    """AROUND resolve_draft_worker_attention_backend: torch_native for a cpu server's draft."""
    from sglang.srt.runtime_context import attention_backends, get_device, get_spec

    if get_device().device != "cpu":
        return original(*args, **kwargs)
    requested = get_spec().speculative_draft_attention_backend or attention_backends()[0]
    return draft_backend_for_cpu(requested) or original(*args, **kwargs)
