"""Torch stand-ins for the GPU-only calls on SGLang's plain and DFLASH paths (see docs/cpu.md).

Every stand-in is installed as an AROUND hook through SGLang's HookRegistry: it computes in torch
only for CPU tensors (or a `--device cpu` server) and hands everything else to SGLang's original,
so GPU behaviour does not change. One file a kernel or a check (hooks.py is the table of all):

    attention.py            torch_native attention: TARGET_VERIFY, sinks, MLA prefill (mla.py)
    causal_conv1d.py        Gated DeltaNet's depthwise causal conv1d; gdn.py, delta_rule.py: the
                            rest of the layer; qwen3_5_elementwise.py: its elementwise kernels;
                            gdn_replayssm.py, gdn_replayssm_math.py: its ReplaySSM verify ring;
                            gdn_ragged_verify.py: a ragged verify (per-request lengths) through it
    mamba_state.py          row copies between mamba state slots; mamba_policy.py: extra_buffer
    kv_pool.py              KV-pool row moves; req_to_token.py: the request -> slot table
    rotary.py, embeds.py    rotary embedding, input embeddings in the model's dtype
    collectives.py          TP over gloo; dp_padding.py, dp_controller.py: attention DP
    disaggregation.py       PD on CPU; fork_launch.py: forked server processes (opt-in)
    platform_checks.py      DFLASH (and block verification) admitted on `--device cpu`
    gpt_oss.py              gpt-oss resolution with torch_native attention
    no_accelerator.py       calls made as if an accelerator were there; record_stream.py: a no-op
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
