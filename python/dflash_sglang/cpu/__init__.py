"""Torch stand-ins for the GPU-only calls on SGLang's plain and DFLASH paths (see docs/cpu.md).

Every stand-in is installed as an AROUND hook through SGLang's HookRegistry: it computes in torch
only for CPU tensors (or a `--device cpu` server) and hands everything else to SGLang's original,
so GPU behaviour does not change.
"""

from __future__ import annotations

from .hooks import HOOKS
from .no_accelerator import TORCH_WIDE_TARGETS, has_accelerator


def install() -> None:
    """Register the CPU stand-ins with SGLang's HookRegistry (applied by load_plugins). With an
    accelerator, the hooks on torch itself (factories, synchronize) would only pass every call
    through, so a GPU server's step does not pay for their wrapper."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    skip = TORCH_WIDE_TARGETS if has_accelerator() else ()
    for hook in HOOKS:
        if hook.target not in skip:
            HookRegistry.register(hook.target, hook.fn, HookType.AROUND)
