"""The table of SGLang targets the CPU layer hooks, one row per stand-in (docs/cpu.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import (
    attention,
    causal_conv1d,
    collectives,
    disaggregation,
    dp_controller,
    dp_padding,
    embeds,
    fork_launch,
    gdn,
    gdn_ragged_verify,
    gdn_replayssm,
    gpt_oss,
    kv_pool,
    mamba_policy,
    mamba_state,
    no_accelerator,
    platform_checks,
    qwen3_5_elementwise,
    record_stream,
    req_to_token,
    rotary,
)


@dataclass(frozen=True)
class Hook:
    target: str  # dotted path HookRegistry resolves
    fn: Callable  # AROUND hook: fn(original, *args, **kwargs)


HOOKS: tuple[Hook, ...] = (
    Hook(fork_launch.TARGET, fork_launch.fork_subprocesses_on_cpu),
    Hook(rotary.TARGET, rotary.rotary_init_without_vllm),
    Hook(platform_checks.HANDLE_DFLASH, platform_checks.allow_dflash_on_cpu),
    Hook(platform_checks.HANDLE_SPECULATIVE, platform_checks.allow_block_verification_on_cpu),
    Hook(platform_checks.RESOLVE_DRAFT_BACKEND, platform_checks.keep_torch_native_draft_on_cpu),
    Hook(platform_checks.DRAFT_WORKER_BACKEND, platform_checks.draft_worker_backend_on_cpu),
    Hook(kv_pool.TARGET, kv_pool.native_kv_move_on_cpu),
    Hook(req_to_token.ASSIGN_TARGET, req_to_token.assign_req_to_token_pool_on_cpu),
    Hook(req_to_token.GATHER_TARGET, req_to_token.assign_extend_cache_locs_on_cpu),
    Hook(record_stream.TARGET, record_stream.record_stream_on_cpu),
    Hook(embeds.TARGET, embeds.extend_kwargs_in_model_dtype),
    Hook(attention.TARGET, attention.forward_extend_on_cpu),
    Hook(attention.DECODE_TARGET, attention.forward_decode_on_cpu),
    # gpt-oss (sinks, sliding windows): startup; the sinks themselves are in attention's hooks.
    Hook(gpt_oss.ADJUSTMENTS_TARGET, gpt_oss.allow_torch_native_for_gpt_oss_on_cpu),
    Hook(no_accelerator.TRITON_KERNELS_TARGET, no_accelerator.triton_kernels_need_an_accelerator),
    # Hybrid (Gated DeltaNet) targets: startup, prefill, decode, then verify and commit.
    Hook(mamba_policy.VALIDATE_TARGET, mamba_policy.validate_extra_buffer_on_cpu),
    Hook(mamba_policy.PLATFORM_TARGET, mamba_policy.platform_supports_extra_buffer_on_cpu),
    Hook(qwen3_5_elementwise.SPLIT_TARGET, qwen3_5_elementwise.split_qkvzba_on_cpu),
    Hook(causal_conv1d.FN_TARGET, causal_conv1d.causal_conv1d_fn_on_cpu),
    Hook(gdn.GATING_TARGET, gdn.fused_gdn_gating_on_cpu),
    Hook(gdn.CHUNK_TARGET, gdn.chunk_gated_delta_rule_on_cpu),
    Hook(qwen3_5_elementwise.GATED_NORM_TARGET, qwen3_5_elementwise.gated_rms_norm_forward_on_cpu),
    Hook(qwen3_5_elementwise.SIGMOID_MUL_TARGET, qwen3_5_elementwise.sigmoid_mul_on_cpu),
    Hook(qwen3_5_elementwise.SHARED_GATE_TARGET, qwen3_5_elementwise.shared_expert_gate_on_cpu),
    Hook(mamba_state.TRACK_TARGET, mamba_state.track_on_cpu),
    Hook(mamba_state.TRACK_ALL_LAYERS_TARGET, mamba_state.track_all_layers_on_cpu),
    Hook(no_accelerator.PIN_MEMORY_TARGET, no_accelerator.pin_memory_without_accelerator),
    *(Hook(target, no_accelerator.factory_without_pinning) for target in no_accelerator.FACTORY_TARGETS),
    *(
        Hook(target, no_accelerator.synchronize_without_accelerator)
        for target in (no_accelerator.SYNCHRONIZE_TARGET, *no_accelerator.HOST_REGISTER_TARGETS)
    ),
    Hook(causal_conv1d.UPDATE_TARGET, causal_conv1d.causal_conv1d_update_on_cpu),
    Hook(gdn.PACKED_DECODE_TARGET, gdn.packed_decode_on_cpu),
    Hook(gdn.RECURRENT_TARGET, gdn.sigmoid_gating_delta_rule_update_on_cpu),
    Hook(gdn_ragged_verify.TARGET, gdn_ragged_verify.forward_extend_on_cpu),
    Hook(gdn_replayssm.VERIFY_TARGET, gdn_replayssm.gdn_replayssm_spec_decode_on_cpu),
    Hook(gdn_replayssm.ADVANCE_TARGET, gdn_replayssm.commit_gdn_replayssm_spec_on_cpu),
    Hook(gdn_replayssm.COMMIT_TARGET, gdn_replayssm.commit_gdn_replayssm_circular_on_cpu),
    Hook(mamba_state.SCATTER_TARGET, mamba_state.scatter_with_mask_on_cpu),
    Hook(mamba_state.CONV_SCATTER_TARGET, mamba_state.scatter_with_mask_on_cpu),
    Hook(mamba_state.CONV_SCATTER_MULTI_TARGET, mamba_state.conv_scatter_multi_on_cpu),
    # Tensor parallelism over gloo (--tp-size > 1 on a cpu server).
    Hook(collectives.PARALLEL_GROUP_TARGET, collectives.group_without_pynccl_on_cpu),
    Hook(collectives.ALL_GATHER_TARGET, collectives.all_gather_into_tensor_on_cpu),
    # Attention DP (--enable-dp-attention) on a cpu server.
    Hook(dp_padding.FILL_VALUE_TARGET, dp_padding.padded_seq_len_one_for_torch_native),
    Hook(dp_padding.MEMCPY_TARGET, dp_padding.memcpy_on_cpu),
    Hook(dp_controller.TARGET, dp_controller.event_loop_waiting_when_idle),
    # PD disaggregation (--disaggregation-mode prefill|decode) on a cpu server.
    Hook(disaggregation.SENDER_INIT_TARGET, disaggregation.sender_without_device_indices_on_cpu),
    Hook(disaggregation.EARLY_SEND_TARGET, disaggregation.no_early_prefix_send_on_cpu),
)
