"""Torch stand-ins for the GPU-only calls on SGLang's plain and DFLASH paths (see docs/cpu.md).

Every stand-in is installed as an AROUND hook through SGLang's HookRegistry: it computes in torch
only for CPU tensors (or a `--device cpu` server) and hands everything else to SGLang's original,
so GPU behaviour does not change.
"""

from __future__ import annotations

from .hooks import HOOKS


def install() -> None:
    """Register the CPU stand-ins with SGLang's HookRegistry (applied by load_plugins)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for hook in HOOKS:
        HookRegistry.register(hook.target, hook.fn, HookType.AROUND)
