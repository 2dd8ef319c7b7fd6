"""The table of SGLang targets the CPU layer hooks, one row per stand-in (docs/cpu.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import attention, embeds, kv_pool, policy, req_to_token, rotary, streams


@dataclass(frozen=True)
class Hook:
    target: str  # dotted path HookRegistry resolves
    fn: Callable  # AROUND hook: fn(original, *args, **kwargs)


HOOKS: tuple[Hook, ...] = (
    Hook(rotary.TARGET, rotary.rotary_init_without_vllm),
    Hook(policy.HANDLE_DFLASH, policy.allow_dflash_on_cpu),
    Hook(policy.RESOLVE_DRAFT_BACKEND, policy.keep_torch_native_draft_on_cpu),
    Hook(policy.DRAFT_WORKER_BACKEND, policy.draft_worker_backend_on_cpu),
    Hook(kv_pool.TARGET, kv_pool.native_kv_move_on_cpu),
    Hook(req_to_token.ASSIGN_TARGET, req_to_token.assign_req_to_token_pool_on_cpu),
    Hook(req_to_token.GATHER_TARGET, req_to_token.assign_extend_cache_locs_on_cpu),
    Hook(streams.TARGET, streams.record_stream_on_cpu),
    Hook(embeds.TARGET, embeds.extend_kwargs_in_model_dtype),
    Hook(attention.TARGET, attention.forward_extend_with_target_verify),
)
