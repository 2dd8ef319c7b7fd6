"""Torch stand-ins for the GPU-only calls on SGLang's plain and DFLASH paths (see docs/cpu.md).

Every stand-in is an AROUND hook through SGLang's HookRegistry (hooks.py is the table of all): it
computes in torch only for CPU tensors (or a `--device cpu` server) and hands everything else to
SGLang's original. Three kinds, a folder each:

    kernels/          GPU kernels of dense targets and the drafter: attention (TARGET_VERIFY,
                      sinks, MLA prefill), rotary, embeddings, KV-pool, request-table and
                      mamba-state row moves
    gated_deltanet/   the Gated DeltaNet layer: causal conv1d, the delta rule (chunked prefill,
                      decode, per-node tree states), its elementwise kernels, the ReplaySSM verify
                      ring and a ragged verify (per-request lengths) through it
    platform/         what lets a cpu server start and run its processes: DFLASH admitted on
                      `--device cpu`, no pinning or synchronize without an accelerator, TP over
                      gloo, attention DP, PD, forked subprocesses, gpt-oss and mamba resolution

Kernel stand-ins are installed only on a host without an accelerator; platform ones everywhere
(those on torch itself only without an accelerator: on a GPU host they would only pass through).
May import: errors, environment, runtime/ and SGLang.
"""

from __future__ import annotations

from .hooks import KERNEL_HOOKS, PLATFORM_HOOKS
from .platform.no_accelerator import TORCH_WIDE_TARGETS, has_accelerator


def install() -> None:
    """Register the CPU stand-ins with SGLang's HookRegistry (applied by load_plugins). With an
    accelerator, SGLang's kernels run unwrapped, and so do the torch calls every step makes
    (factories, synchronize): a GPU server's step does not pay for a wrapper that would only
    pass the call through."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if has_accelerator():
        hooks = tuple(hook for hook in PLATFORM_HOOKS if hook.target not in TORCH_WIDE_TARGETS)
    else:
        hooks = PLATFORM_HOOKS + KERNEL_HOOKS
    for hook in hooks:
        HookRegistry.register(hook.target, hook.fn, HookType.AROUND)
