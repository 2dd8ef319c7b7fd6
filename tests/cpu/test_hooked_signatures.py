"""Fail loudly when SGLang (or torch) moves or changes anything the CPU layer hooks or leans on.

The stand-ins replace private functions of the pinned sglang==0.5.23. An upgrade that renames,
moves or re-signs one would otherwise show up as a hook that silently never applies
(HookRegistry logs and skips targets it cannot resolve) or as a wrong keyword binding.
"""

import inspect
import pkgutil

import pytest

from dflash_sglang.cpu.hooks import HOOKS

SIGNATURES = {
    # The DP controller's receive on an idle cpu server (cpu/platform/dp_controller.py).
    "sglang.srt.managers.data_parallel_controller.DataParallelController.event_loop":
        "(self)",
    # Opt-in forked subprocesses on a cpu server (cpu/platform/fork_launch.py).
    "sglang.srt.entrypoints.engine._set_envs_and_config":
        "(server_args: 'ServerArgs')",
    "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.__init__":
        "(self, head_size: 'int', rotary_dim: 'int', max_position_embeddings: 'int', base: 'int', "
        "is_neox_style: 'bool', dtype: 'torch.dtype', position_start: 'int' = 0) -> 'None'",
    "sglang.srt.arg_groups.speculative_hook._handle_dflash":
        "(server_args: 'ServerArgs') -> 'None'",
    "sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding":
        "(server_args: 'ServerArgs') -> 'None'",
    "sglang.srt.arg_groups.speculative_hook._resolve_dflash_draft_attention_backend":
        "(server_args: 'ServerArgs') -> 'None'",
    "sglang.srt.speculative.draft_worker_common.resolve_draft_worker_attention_backend":
        "(*, algo_label: 'Optional[str]' = None) -> 'str'",
    "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool._init_kv_copy_and_warmup":
        "(self)",
    "sglang.srt.mem_cache.allocation.assign_req_to_token_pool_func":
        "(req_pool_indices: 'torch.Tensor', req_to_token: 'torch.Tensor', start_offset: 'torch.Tensor', "
        "end_offset: 'torch.Tensor', out_cache_loc: 'torch.Tensor', batch_size: 'int')",
    "sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func":
        "(req_pool_indices: 'torch.Tensor', req_to_token: 'torch.Tensor', start_offset: 'torch.Tensor', "
        "end_offset: 'torch.Tensor', batch_size: 'int', draft_token_num: 'int', device) -> 'torch.Tensor'",
    "torch.Tensor.record_stream":
        "record_stream(stream)",  # a builtin: its docstring's first line
    "sglang.srt.model_executor.model_runner.ModelRunner._extend_forward_kwargs":
        "(self, forward_batch: 'ForwardBatch', pp_proxy_tensors) -> 'dict'",
    "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend":
        "(self, q, k, v, layer: 'RadixAttention', forward_batch: 'ForwardBatch', save_kv_cache=True)",
    "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_decode":
        "(self, q, k, v, layer: 'RadixAttention', forward_batch: 'ForwardBatch', save_kv_cache=True)",
    # gpt-oss on a cpu server.
    "sglang.srt.arg_groups.model_hook.handle_model_specific_adjustments":
        "(server_args: 'Any')",
    "sglang.srt.utils.common.is_triton_kernels_available":
        "() -> 'bool'",
    # Hybrid (Gated DeltaNet) targets.
    "sglang.srt.arg_groups.mamba_hook.validate_mamba_extra_buffer":
        "(view, hf_config: 'Any', *, mamba_cache_chunk_size_of)",
    "sglang.srt.arg_groups.mamba_hook._platform_supports_mamba_cache_extra_buffer":
        "() -> 'bool'",
    "sglang.kernels.ops.attention.triton_gdn_fused_proj.fused_qkvzba_split_reshape_cat_contiguous":
        "(mixed_qkvz, mixed_ba, num_heads_qk, num_heads_v, head_qk, head_v)",
    "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_fn":
        "(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], "
        "conv_states: torch.Tensor, query_start_loc: torch.Tensor, seq_lens_cpu: List[int], "
        "cache_indices: Optional[torch.Tensor] = None, has_initial_state: Optional[torch.Tensor] = None, "
        "activation: Optional[str] = 'silu', pad_slot_id: int = -1, validate_data=False, "
        "block_table: Optional[torch.Tensor] = None, **kwargs)",
    "sglang.kernels.ops.attention.linear.fused_gdn_gating.fused_gdn_gating":
        "(A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor, "
        "beta: float = 1.0, threshold: float = 20.0) -> Tuple[torch.Tensor, torch.Tensor]",
    "sglang.kernels.ops.attention.fla.chunk.chunk_gated_delta_rule":
        "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, "
        "scale: float = None, initial_state: torch.Tensor = None, "
        "initial_state_indices: torch.Tensor = None, cu_seqlens: Optional[torch.LongTensor] = None, "
        "head_first: bool = False, use_qk_l2norm_in_kernel: bool = False, inplace_update: bool = True)",
    "sglang.kernels.ops.attention.fla.layernorm_gated.RMSNorm.forward":
        "(self, x, z=None)",
    "sglang.kernels.ops.elementwise.elementwise.fused_sigmoid_mul":
        "(attn_output: torch.Tensor, gate: torch.Tensor, inplace: bool = False, "
        "quant: bool = False) -> torch.Tensor",
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.track_mamba_states_if_needed":
        "(conv_states: torch.Tensor, ssm_states: torch.Tensor, cache_indices: torch.Tensor, "
        "mamba_track_mask: torch.Tensor, mamba_track_indices: torch.Tensor, batch_size: int, "
        "check_freed_slots: bool = False)",
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.track_mamba_states_all_layers":
        "(conv_states_pool: torch.Tensor, ssm_states_pool: torch.Tensor, cache_indices: torch.Tensor, "
        "mamba_track_mask: torch.Tensor, mamba_track_indices: torch.Tensor, batch_size: int, "
        "check_freed_slots: bool = False)",
    "torch.Tensor.pin_memory":
        "pin_memory() -> Tensor",
    "sglang.srt.mem_cache.pool_host.common._cuda_host_register":
        "(buffer: 'torch.Tensor', registration_granularity_bytes: 'int | None' = None) -> 'None'",
    "sglang.srt.mem_cache.pool_host.common._cuda_host_unregister":
        "(buffer: 'torch.Tensor') -> 'None'",
    "torch.cuda.synchronize":
        "(device: torch.device | str | int | None = None) -> None",
    "torch.tensor":
        "tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False) -> Tensor",
    "torch.zeros":
        "zeros(*size, *, out=None, dtype=None, layout=torch.strided, device=None, "
        "requires_grad=False) -> Tensor",
    "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update":
        "(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, "
        "bias: Optional[torch.Tensor] = None, activation: Union[bool, str, NoneType] = None, "
        "cache_seqlens: Optional[torch.Tensor] = None, "
        "conv_state_indices: Optional[torch.Tensor] = None, "
        "num_accept_tokens: Optional[torch.Tensor] = None, "
        "intermediate_conv_window: Optional[torch.Tensor] = None, "
        "intermediate_state_indices: Optional[torch.Tensor] = None, "
        "retrieve_next_token: Optional[torch.Tensor] = None, "
        "retrieve_next_sibling: Optional[torch.Tensor] = None, "
        "retrieve_parent_token: Optional[torch.Tensor] = None, pad_slot_id: int = -1, metadata=None, "
        "validate_data=False)",
    "sglang.kernels.ops.attention.fla.fused_recurrent.fused_recurrent_gated_delta_rule_packed_decode":
        "(mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, "
        "dt_bias: torch.Tensor, scale: float, initial_state: torch.Tensor, out: torch.Tensor, "
        "ssm_state_indices: torch.Tensor, use_qk_l2norm_in_kernel: bool = False) -> tuple[torch.Tensor, "
        "torch.Tensor]",
    "sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update":
        "(A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, softplus_beta: float, "
        "softplus_threshold: float, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, "
        "initial_state_source: torch.Tensor, initial_state_indices: torch.Tensor, "
        "scale: Optional[float] = None, use_qk_l2norm_in_kernel: bool = False, "
        "cu_seqlens: Optional[torch.Tensor] = None, is_kda: bool = False, "
        "lower_bound: Optional[float] = None, disable_state_update: bool = False, "
        "intermediate_states_buffer: Optional[torch.Tensor] = None, "
        "intermediate_state_indices: Optional[torch.Tensor] = None, cache_steps: Optional[int] = None, "
        "retrieve_parent_token: Optional[torch.Tensor] = None, cache_ring: bool = False, "
        "replayssm_rawv: Optional[torch.Tensor] = None, replayssm_rawk: Optional[torch.Tensor] = None, "
        "replayssm_g: Optional[torch.Tensor] = None, replayssm_beta: Optional[torch.Tensor] = None, "
        "match_cutedsl_decode: bool = False)",
    # A ragged TARGET_VERIFY through the GDN layers (cpu/gated_deltanet/ragged_verify.py).
    "sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend.forward_extend":
        "(self, layer: sglang.srt.layers.radix_linear_attention.RadixLinearAttention, "
        "forward_batch: sglang.srt.model_executor.forward_batch_info.ForwardBatch, "
        "mixed_qkv: Union[torch.Tensor, Tuple[torch.Tensor, ...]], a: torch.Tensor, b: torch.Tensor, "
        "**kwargs)",
    # ReplaySSM spec-verify ring (cpu/gated_deltanet/replayssm.py). dot_precision's default is 'tf32' where
    # SGLang finds TF32 (an Ampere or newer GPU), 'ieee' here.
    "sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode.gdn_replayssm_spec_decode":
        "(q: 'torch.Tensor', k: 'torch.Tensor', v: 'torch.Tensor', a: 'torch.Tensor', b: 'torch.Tensor', "
        "A_log: 'torch.Tensor', dt_bias: 'torch.Tensor', checkpoint_state: 'torch.Tensor', "
        "d_cache: 'torch.Tensor', k_cache: 'torch.Tensor', g_cache: 'torch.Tensor', "
        "rawv_cache: 'torch.Tensor | None', rawk_cache: 'torch.Tensor | None', "
        "beta_cache: 'torch.Tensor | None', out: 'torch.Tensor', query_start_loc: 'torch.Tensor', "
        "ssm_state_indices: 'torch.Tensor', replay_indices: 'torch.Tensor', write_pos: 'torch.Tensor', "
        "cache_base: 'torch.Tensor', is_flush: 'torch.Tensor', max_cache_len: 'int', max_spec_len: 'int', "
        "scale: 'float | None' = None, use_qk_l2norm_in_kernel: 'bool' = True, null_block_id: 'int' = 0, "
        "block_v: 'int' = 64, num_warps: 'int' = 1, num_stages: 'int' = 2, nk: 'int' = 2, bs_min: 'int' = 4, "
        "block_v_flush: 'int' = 64, num_warps_flush: 'int' = 1, num_stages_flush: 'int' = 2, "
        "nk_flush: 'int' = 2, launch_mode: 'str' = 'both', dot_precision: 'str' = 'ieee')",
    "sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode.commit_gdn_replayssm_spec":
        "(write_pos: 'torch.Tensor', cache_base: 'torch.Tensor', is_flush: 'torch.Tensor', "
        "num_accepted: 'torch.Tensor', replay_indices: 'torch.Tensor', max_cache_len: 'int', "
        "max_spec_len: 'int', fold_every_commit: 'bool' = False, cache_buf_len: 'int | None' = None, "
        "null_block_id: 'int' = 0)",
    "sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode.commit_gdn_replayssm_circular":
        "(*, checkpoint_state: 'torch.Tensor', d_cache: 'torch.Tensor', k_cache: 'torch.Tensor', "
        "g_cache: 'torch.Tensor', d_residual_cache: 'torch.Tensor | None', "
        "k_residual_cache: 'torch.Tensor | None', state_batch_indices: 'torch.Tensor', "
        "replay_indices: 'torch.Tensor', write_pos: 'torch.Tensor', cache_base: 'torch.Tensor', "
        "is_flush: 'torch.Tensor', accept_lens: 'torch.Tensor', "
        "mamba_track_indices: 'torch.Tensor | None' = None, "
        "mamba_steps_to_track: 'torch.Tensor | None' = None, null_block_id: 'int' = -1) -> 'None'",
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_mamba_state_scatter_with_mask":
        "(dst: torch.Tensor, src: torch.Tensor, dst_indices_raw: torch.Tensor, "
        "step_indices_raw: torch.Tensor, src_indices_raw: torch.Tensor | None = None)",
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_conv_window_scatter_with_mask":
        "(dst: torch.Tensor, src: torch.Tensor, dst_indices_raw: torch.Tensor, "
        "step_indices_raw: torch.Tensor, src_indices_raw: torch.Tensor | None = None)",
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_conv_window_scatter_multi":
        "(pairs, dst_indices_raw: torch.Tensor, step_indices_raw: torch.Tensor, "
        "dst_indices2_raw: torch.Tensor | None = None, "
        "step_indices2_raw: torch.Tensor | None = None) -> None",
    # Tensor parallelism over gloo.
    "sglang.srt.distributed.parallel_state.init_model_parallel_group":
        "(group_ranks: List[List[int]], local_rank: int, backend: str, use_pynccl: Optional[bool] = None, "
        "use_custom_allreduce: Optional[bool] = None, use_message_queue_broadcaster: bool = False, "
        "group_name: Optional[str] = None, use_mscclpp: Optional[bool] = None, "
        "use_torch_symm_mem_allreduce: Optional[bool] = None, recovered_rank: bool = False, "
        "rank_offset: int = 0, max_world_size: Optional[int] = None) -> "
        "sglang.srt.distributed.parallel_state.GroupCoordinator",
    "sglang.srt.distributed.parallel_state.GroupCoordinator.all_gather_into_tensor":
        "(self, output: torch.Tensor, input: torch.Tensor)",
    "sglang.srt.layers.attention.base_attn_backend.AttentionBackend.get_cuda_graph_seq_len_fill_value":
        "(self)",
    "sglang.srt.layers.dp_attention.memcpy": "(dst, src, dim, offset, sz, offset_src)",
    "sglang.kernels.ops.elementwise.elementwise._launch_fused_gate_sigmoid_mul":
        "(hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor, "
        "output: torch.Tensor, *, do_add: bool) -> None",
    "sglang.srt.disaggregation.common.conn.CommonKVSender.__init__":
        "(self, mgr: 'CommonKVManager', bootstrap_addr: 'str', bootstrap_room: 'int', "
        "req_has_disagg_prefill_dp_rank: 'bool' = False)",
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.maybe_send_cached_prefix_chunk":
        "(self: 'Scheduler', req: 'Req', allow_send: 'bool' = True) -> 'None'",
}  # fmt: skip

# Attributes the stand-ins read or set besides their targets.
RELIED_ON = [
    ("sglang.srt.layers.rotary_embedding.base", ["_is_cpu", "_is_cuda", "_is_hip"]),
    ("sglang.srt.mem_cache.memory_pool.MHATokenToKVPool", ["move_kv_cache", "_move_kv_cache_impl"]),
    ("sglang.srt.mem_cache.memory_pool", ["move_kv_cache_native", "KVWriteLoc"]),
    ("sglang.srt.arg_groups.overrides",
     ["declare_resolution", "resolving_view", "resolved_view", "attention_backends_of", "model_config_of"]),
    ("sglang.srt.connector", ["ConnectorType", "parse_connector_type"]),
    # Sliding layers of a hybrid SWA pool are read through its slot translation (cpu/kernels/attention.py).
    ("sglang.srt.mem_cache.swa_memory_pool.SWAKVPool", ["translate_loc_from_full_to_swa", "get_key_buffer"]),
    ("sglang.srt.runtime_context", ["attention_backends", "get_device", "get_spec"]),
    ("sglang.srt.layers.radix_attention.AttentionType", ["ENCODER_ONLY", "DECODER"]),
    ("sglang.srt.model_executor.forward_batch_info.ForwardMode", ["TARGET_VERIFY", "is_target_verify"]),
    ("sglang.kernels.ops.attention.triton_gdn_fused_proj", ["qwen3_5_gdn_prefill_projection_views"]),
    ("sglang.kernels.ops.attention.fla.chunk", ["CHUNK_SIZE"]),
    ("sglang.kernels.ops.mamba.causal_conv1d_triton", ["PAD_SLOT_ID"]),
    ("torch.accelerator", ["is_available"]),
    ("sglang.srt.distributed.parallel_state", ["_group_coordinator_device"]),
    ("sglang.srt.distributed.parallel_state.GroupCoordinator", ["_all_gather_into_tensor"]),
    ("sglang.srt.layers.dp_attention", ["memcpy_cpu"]),
    ("sglang.srt.layers.attention.torch_native_backend", ["TorchNativeAttnBackend"]),
    # The MHA form of MLA prefill (cpu/kernels/mla.py): the packed lengths it reads, and the pool it detects.
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch",
     ["extend_seq_lens_cpu", "extend_prefix_lens_cpu"]),
    ("sglang.srt.mem_cache.memory_pool", ["MLATokenToKVPool"]),
    # The ragged GDN verify (cpu/gated_deltanet/ragged_verify.py): what it calls and reads besides its target.
    ("sglang.srt.layers.attention.linear.gdn_backend",
     ["causal_conv1d_update", "GDNAttnBackend"]),
    ("sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend",
     ["_replayssm_target_verify", "forward_metadata"]),
    ("sglang.srt.layers.attention.linear.utils", ["select_verify_intermediate_state_indices"]),
    ("sglang.srt.speculative.ragged_verify.RaggedVerifyLayout", ["qo_indptr_device", "verify_lens_cpu"]),
    # The prefill side reads it to choose the host-indices path (cpu/platform/disaggregation.py).
    ("sglang.srt.disaggregation.mooncake.conn.MooncakeKVSender", ["supports_host_tensor_indices"]),
]  # fmt: skip


def unwrapped(target: str):
    obj = pkgutil.resolve_name(target)
    return getattr(obj, "__wrapped__", obj)  # hooks may already be applied in this process


def signature_of(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except ValueError:  # C builtins carry their signature in the docstring
        return obj.__doc__.strip().splitlines()[0]


def test_every_hook_has_a_recorded_signature():
    assert sorted(hook.target for hook in HOOKS) == sorted(SIGNATURES)


@pytest.mark.parametrize("target", sorted(SIGNATURES))
def test_hooked_target_exists_with_the_recorded_signature(target):
    assert signature_of(unwrapped(target)) == SIGNATURES[target]


@pytest.mark.parametrize("hook", HOOKS, ids=lambda hook: hook.target.rsplit(".", 2)[-2])
def test_hook_parameters_bind_like_the_target(hook):
    """Callers pass keywords (e.g. `assign_extend_cache_locs_func(req_pool_indices=...)`): a hook
    that names its parameters must name them as the target does, after `original`."""
    params = list(inspect.signature(hook.fn).parameters.values())
    assert params[0].name == "original"
    named = [p.name for p in params[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    try:
        target = list(inspect.signature(unwrapped(hook.target)).parameters)
    except ValueError:
        target = ["self", "stream"]  # Tensor.record_stream, Tensor.pin_memory (self, device)
    assert len(named) <= len(target)
    for ours, theirs in zip(named, target):  # noqa: B905 (hooks may take the tail as *args)
        assert theirs == "self" or ours == theirs


@pytest.mark.parametrize("owner,names", RELIED_ON, ids=[owner for owner, _ in RELIED_ON])
def test_relied_on_attributes_exist(owner, names):
    obj = pkgutil.resolve_name(owner)
    assert [name for name in names if not hasattr(obj, name)] == []
