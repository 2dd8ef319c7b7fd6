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
    "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.__init__":
        "(self, head_size: 'int', rotary_dim: 'int', max_position_embeddings: 'int', base: 'int', "
        "is_neox_style: 'bool', dtype: 'torch.dtype', position_start: 'int' = 0) -> 'None'",
    "sglang.srt.arg_groups.speculative_hook._handle_dflash":
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
}  # fmt: skip

# Attributes the stand-ins read or set besides their targets.
RELIED_ON = [
    ("sglang.srt.layers.rotary_embedding.base", ["_is_cpu", "_is_cuda", "_is_hip"]),
    ("sglang.srt.mem_cache.memory_pool.MHATokenToKVPool", ["move_kv_cache", "_move_kv_cache_impl"]),
    ("sglang.srt.mem_cache.memory_pool", ["move_kv_cache_native", "KVWriteLoc"]),
    ("sglang.srt.arg_groups.overrides",
     ["declare_resolution", "resolving_view", "resolved_view", "attention_backends_of"]),
    ("sglang.srt.runtime_context", ["attention_backends", "get_device", "get_spec"]),
    ("sglang.srt.layers.radix_attention.AttentionType", ["ENCODER_ONLY", "DECODER"]),
    ("sglang.srt.model_executor.forward_batch_info.ForwardMode", ["TARGET_VERIFY", "is_target_verify"]),
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
        target = ["self", "stream"]  # Tensor.record_stream
    assert len(named) <= len(target)
    for ours, theirs in zip(named, target):  # noqa: B905 (hooks may take the tail as *args)
        assert theirs == "self" or ours == theirs


@pytest.mark.parametrize("owner,names", RELIED_ON, ids=[owner for owner, _ in RELIED_ON])
def test_relied_on_attributes_exist(owner, names):
    obj = pkgutil.resolve_name(owner)
    assert [name for name in names if not hasattr(obj, name)] == []
