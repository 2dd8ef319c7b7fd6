"""Platform policy: let a `--device cpu` server run DFLASH with a torch_native draft (and block
verification, whose torch version runs anywhere).

SGLang refuses DFLASH unless the device is CUDA, NPU or XPU, and its draft-backend whitelists
lack torch_native, so a cpu draft would fall back to FlashInfer, which cannot load. The refusal is
the only device-specific step of `_handle_dflash`; the rest (block size, topk, draft backend,
max running requests) is resolution we want unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

HANDLE_DFLASH = "sglang.srt.arg_groups.speculative_hook._handle_dflash"
HANDLE_SPECULATIVE = "sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding"
RESOLVE_DRAFT_BACKEND = "sglang.srt.arg_groups.speculative_hook._resolve_dflash_draft_attention_backend"
DRAFT_WORKER_BACKEND = "sglang.srt.speculative.draft_worker_common.resolve_draft_worker_attention_backend"

CPU_DRAFT_BACKEND = "torch_native"
SOURCE = "dflash_sglang.cpu.platform.checks"

# Set while `_handle_dflash` resolves a cpu server (the device reads as cuda inside it).
_resolving_dflash_on_cpu: ContextVar[bool] = ContextVar("resolving_dflash_on_cpu", default=False)


def draft_backend_for_cpu(requested: str | None) -> str | None:
    """torch_native when the operator asked for it or for nothing; None: leave it to SGLang."""
    return CPU_DRAFT_BACKEND if requested in (None, CPU_DRAFT_BACKEND) else None


@contextmanager
def declared(server_args, **fields):
    """A temporary resolution declaration of `fields`, removed again on exit."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    declare_resolution(server_args, SOURCE, **fields)
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
        with declared(server_args, device="cuda"):
            return original(server_args)
    finally:
        _resolving_dflash_on_cpu.reset(token)


def allow_block_verification_on_cpu(original, server_args):
    """AROUND handle_speculative_decoding: SGLang refuses `--speculative-use-block-verification`
    off CUDA (its kernel is Triton); our DFLASH worker's is torch (sampling/block_verify.py). On
    cpu the flag is hidden from that check only, and reads as given again after it."""
    from sglang.srt.arg_groups.overrides import resolving_view

    view = resolving_view(server_args)
    if view.device != "cpu" or not view.speculative_use_block_verification:
        return original(server_args)
    if str(view.speculative_algorithm).upper() != "DFLASH":
        return original(server_args)
    with declared(server_args, speculative_use_block_verification=False):
        return original(server_args)


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
