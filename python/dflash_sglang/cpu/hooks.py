"""The table of SGLang targets the CPU layer hooks, one row per stand-in (docs/cpu.md).

PLATFORM_HOOKS let a cpu server start and run its processes (admission, pinning, collectives, PD,
attention DP): installed on every host (each passes an accelerator's calls through). KERNEL_HOOKS
stand in for GPU kernels (attention, Gated DeltaNet, KV and state moves): installed only on a
host without an accelerator, so a GPU server's kernels are SGLang's own, unwrapped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .gated_deltanet import causal_conv1d, chunk_and_decode, elementwise, ragged_verify, replayssm
from .kernels import attention, embeds, kv_pool, mamba_state, req_to_token, rotary
from .platform import (
    checks,
    collectives,
    disaggregation,
    dp_controller,
    dp_padding,
    fork_launch,
    gpt_oss,
    mamba_policy,
    no_accelerator,
    record_stream,
)


@dataclass(frozen=True)
class Hook:
    target: str  # dotted path HookRegistry resolves
    fn: Callable  # AROUND hook: fn(original, *args, **kwargs)


PLATFORM_HOOKS: tuple[Hook, ...] = (
    # Startup: processes, DFLASH and its draft backend admitted on `--device cpu`, gpt-oss, mamba.
    Hook(fork_launch.TARGET, fork_launch.fork_subprocesses_on_cpu),
    Hook(checks.HANDLE_DFLASH, checks.allow_dflash_on_cpu),
    Hook(checks.HANDLE_SPECULATIVE, checks.allow_block_verification_on_cpu),
    Hook(checks.RESOLVE_DRAFT_BACKEND, checks.keep_torch_native_draft_on_cpu),
    Hook(checks.DRAFT_WORKER_BACKEND, checks.draft_worker_backend_on_cpu),
    Hook(record_stream.TARGET, record_stream.record_stream_on_cpu),
    Hook(gpt_oss.ADJUSTMENTS_TARGET, gpt_oss.allow_torch_native_for_gpt_oss_on_cpu),
    Hook(no_accelerator.TRITON_KERNELS_TARGET, no_accelerator.triton_kernels_need_an_accelerator),
    Hook(mamba_policy.VALIDATE_TARGET, mamba_policy.validate_extra_buffer_on_cpu),
    Hook(mamba_policy.PLATFORM_TARGET, mamba_policy.platform_supports_extra_buffer_on_cpu),
    # Calls made as if an accelerator were there (pinning, synchronize, host registration).
    Hook(no_accelerator.PIN_MEMORY_TARGET, no_accelerator.pin_memory_without_accelerator),
    *(Hook(target, no_accelerator.factory_without_pinning) for target in no_accelerator.FACTORY_TARGETS),
    *(
        Hook(target, no_accelerator.synchronize_without_accelerator)
        for target in (no_accelerator.SYNCHRONIZE_TARGET, *no_accelerator.HOST_REGISTER_TARGETS)
    ),
    # Tensor parallelism over gloo (--tp-size > 1), attention DP, PD disaggregation.
    Hook(collectives.PARALLEL_GROUP_TARGET, collectives.group_without_pynccl_on_cpu),
    Hook(collectives.ALL_GATHER_TARGET, collectives.all_gather_into_tensor_on_cpu),
    Hook(dp_padding.FILL_VALUE_TARGET, dp_padding.padded_seq_len_one_for_torch_native),
    Hook(dp_padding.MEMCPY_TARGET, dp_padding.memcpy_on_cpu),
    Hook(dp_controller.TARGET, dp_controller.event_loop_waiting_when_idle),
    Hook(disaggregation.SENDER_INIT_TARGET, disaggregation.sender_without_device_indices_on_cpu),
    Hook(disaggregation.EARLY_SEND_TARGET, disaggregation.no_early_prefix_send_on_cpu),
)

KERNEL_HOOKS: tuple[Hook, ...] = (
    # Dense targets and the drafter: rotary, KV and request-table moves, embeddings, attention.
    Hook(rotary.TARGET, rotary.rotary_init_without_vllm),
    Hook(kv_pool.TARGET, kv_pool.native_kv_move_on_cpu),
    Hook(req_to_token.ASSIGN_TARGET, req_to_token.assign_req_to_token_pool_on_cpu),
    Hook(req_to_token.GATHER_TARGET, req_to_token.assign_extend_cache_locs_on_cpu),
    Hook(embeds.TARGET, embeds.extend_kwargs_in_model_dtype),
    Hook(attention.TARGET, attention.forward_extend_on_cpu),
    Hook(attention.DECODE_TARGET, attention.forward_decode_on_cpu),
    # Hybrid (Gated DeltaNet) targets: prefill, decode, then verify and commit.
    Hook(elementwise.SPLIT_TARGET, elementwise.split_qkvzba_on_cpu),
    Hook(causal_conv1d.FN_TARGET, causal_conv1d.causal_conv1d_fn_on_cpu),
    Hook(chunk_and_decode.GATING_TARGET, chunk_and_decode.fused_gdn_gating_on_cpu),
    Hook(chunk_and_decode.CHUNK_TARGET, chunk_and_decode.chunk_gated_delta_rule_on_cpu),
    Hook(elementwise.GATED_NORM_TARGET, elementwise.gated_rms_norm_forward_on_cpu),
    Hook(elementwise.SIGMOID_MUL_TARGET, elementwise.sigmoid_mul_on_cpu),
    Hook(elementwise.SHARED_GATE_TARGET, elementwise.shared_expert_gate_on_cpu),
    Hook(mamba_state.TRACK_TARGET, mamba_state.track_on_cpu),
    Hook(mamba_state.TRACK_ALL_LAYERS_TARGET, mamba_state.track_all_layers_on_cpu),
    Hook(causal_conv1d.UPDATE_TARGET, causal_conv1d.causal_conv1d_update_on_cpu),
    Hook(chunk_and_decode.PACKED_DECODE_TARGET, chunk_and_decode.packed_decode_on_cpu),
    Hook(chunk_and_decode.RECURRENT_TARGET, chunk_and_decode.sigmoid_gating_delta_rule_update_on_cpu),
    Hook(ragged_verify.TARGET, ragged_verify.forward_extend_on_cpu),
    Hook(replayssm.VERIFY_TARGET, replayssm.gdn_replayssm_spec_decode_on_cpu),
    Hook(replayssm.ADVANCE_TARGET, replayssm.commit_gdn_replayssm_spec_on_cpu),
    Hook(replayssm.COMMIT_TARGET, replayssm.commit_gdn_replayssm_circular_on_cpu),
    Hook(mamba_state.SCATTER_TARGET, mamba_state.scatter_with_mask_on_cpu),
    Hook(mamba_state.CONV_SCATTER_TARGET, mamba_state.scatter_with_mask_on_cpu),
    Hook(mamba_state.CONV_SCATTER_MULTI_TARGET, mamba_state.conv_scatter_multi_on_cpu),
)

HOOKS = PLATFORM_HOOKS + KERNEL_HOOKS
