"""TARGET_VERIFY attention for SGLang's torch_native backend (CPU).

DFLASH runs two forwards in `ForwardMode.TARGET_VERIFY`: the draft block (non-causal for
`AttentionType.ENCODER_ONLY` layers, causal within a window for sliding draft layers) and the
target's verify of that block (causal). `TorchNativeAttnBackend.forward_extend` has no such mode:
it expects `extend_prefix_lens`/`extend_seq_lens`, which a verify batch does not carry.

In TARGET_VERIFY each request has `seq_lens[i]` committed tokens in its KV and `n` query tokens
(the block) at positions `seq_lens[i] .. seq_lens[i] + n - 1`; their KV slots are
`out_cache_loc[i*n:(i+1)*n]`, also written to `req_to_token[row, seq_lens[i]:seq_lens[i] + n]`.

The same hook also serves the MHA form of MLA prefill (DeepSeek-V2/V3), which torch_native cannot
run as it is (cpu/mla.py). An MLA target's verify takes the weight-absorbed form, one latent KV
head, through the TARGET_VERIFY path here, as its decode does through SGLang's forward_decode.
"""

from __future__ import annotations

import torch
from torch.nn.functional import scaled_dot_product_attention

from ..model import block_visibility as model_block_visibility
from . import mla

TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"


def block_visibility(prefix_len: int, block_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """[block_len, prefix_len + block_len] bool, True where a block query may see a key.

    `window` follows SGLang's `sliding_window_size` (window_left: keys q-window .. q), one less
    than the HF window the drafter's own mask (`model.block_visibility`) takes.
    """
    q_pos = torch.arange(prefix_len, prefix_len + block_len)
    k_pos = torch.arange(prefix_len + block_len)
    hf_window = window + 1 if window is not None and window > -1 else None
    return model_block_visibility(q_pos, k_pos, hf_window, causal)


def verify_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    block_len: int,
    *,
    scaling: float | None,
    causal: bool,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of each request's block of queries over its prefix + block KV.

    q: [bs * block_len, q_heads, head_dim]; k/v_cache: [slots, kv_heads, dim] (block KV already
    written); returns [bs * block_len, q_heads, v_dim].
    """
    out = q.new_empty(q.shape[0], q.shape[1], v_cache.shape[-1])
    gqa = q.shape[1] != k_cache.shape[1]
    for i, (row, prefix) in enumerate(zip(req_pool_indices.tolist(), prefix_lens.tolist(), strict=True)):
        slots = req_to_token[row, : prefix + block_len].long()
        # [heads, tokens, dim], the layout SDPA wants per request.
        q_i = q[i * block_len : (i + 1) * block_len].transpose(0, 1)
        k_i = k_cache[slots].to(q.dtype).transpose(0, 1)
        v_i = v_cache[slots].to(q.dtype).transpose(0, 1)
        mask = block_visibility(prefix, block_len, causal, window).to(q.device)
        o_i = scaled_dot_product_attention(q_i, k_i, v_i, attn_mask=mask, scale=scaling, enable_gqa=gqa)
        out[i * block_len : (i + 1) * block_len] = o_i.transpose(0, 1)
    return out


def tokens_per_request(forward_batch, num_tokens: int) -> int:
    """The block length of a verify batch, as SGLang's other backends read it."""
    spec_info = forward_batch.spec_info
    n = getattr(spec_info, "num_tokens_per_req", -1) if spec_info is not None else -1
    if n is None or n <= 0:
        n = getattr(spec_info, "draft_token_num", None) or num_tokens // forward_batch.batch_size
    if n * forward_batch.batch_size != num_tokens:
        raise ValueError(f"TARGET_VERIFY: {num_tokens} query tokens is not {forward_batch.batch_size} x {n}")
    return int(n)


def forward_target_verify(backend, q, k, v, layer, forward_batch, save_kv_cache=True) -> torch.Tensor:
    """TorchNativeAttnBackend.forward_extend for ForwardMode.TARGET_VERIFY."""
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    if getattr(forward_batch.spec_info, "custom_mask", None) is not None:
        raise NotImplementedError("dflash_sglang CPU TARGET_VERIFY: custom (tree) masks are not supported")
    if layer.is_cross_attention:
        raise NotImplementedError("dflash_sglang CPU TARGET_VERIFY: cross attention is not supported")
    if save_kv_cache and k is not None and v is not None:
        loc = KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc)
        backend.token_to_kv_pool.set_kv_buffer(layer, loc, k, v)
    causal = layer.attn_type != AttentionType.ENCODER_ONLY
    q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
    out = verify_attention(
        q_,
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id),
        backend.token_to_kv_pool.get_value_buffer(layer.layer_id),
        backend.req_to_token_pool.req_to_token,
        forward_batch.req_pool_indices,
        forward_batch.seq_lens,
        tokens_per_request(forward_batch, q_.shape[0]),
        scaling=layer.scaling,
        causal=causal,
        # As SGLang's extend path: the window applies to causal (decoder) layers only.
        window=layer.sliding_window_size if causal else None,
    )
    return out.reshape(q_.shape[0], layer.tp_q_head_num * layer.v_head_dim)


def forward_extend_on_cpu(original, backend, q, k, v, layer, forward_batch, *args, **kwargs):
    """AROUND TorchNativeAttnBackend.forward_extend: for CPU tensors, add TARGET_VERIFY and the
    MHA form of MLA prefill (cpu/mla.py)."""
    if q.device.type != "cpu":
        return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    if forward_batch.forward_mode.is_target_verify():
        return forward_target_verify(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    save_kv_cache = kwargs.get("save_kv_cache", args[0] if args else True)
    if mla.is_mla_mha_form(backend, layer, save_kv_cache):
        return mla.forward_mha_form(q, k, v, layer, forward_batch)
    return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
