"""The multi-head ("MHA") form of MLA prefill for SGLang's torch_native backend (CPU).

DeepSeek-V2/V3-style attention (`DeepseekV2AttentionMLA`) runs in one of two forms, chosen per
forward by `dispatch_attn_forward_method`; torch_native has no handler of its own and gets the
Triton one:
- a prefill with no cached prefix (`forward_mode.is_extend_without_speculative()` and no prefix
  in the batch) takes the MHA form (`AttnForwardMethod.MHA`, `forward_normal`): the latent is
  expanded through `kv_b_proj` into per-head keys and values, handed to `attn_mha` with
  `save_kv_cache=False` (the latent is cached apart, `_set_mla_kv_buffer`);
- everything else (decode, TARGET_VERIFY, a prefill over a cached prefix) takes the
  weight-absorbed form (`AttnForwardMethod.MLA`): queries are absorbed into the latent space and
  `attn_mqa` attends over the cached latent, one KV head.

torch_native's `forward_extend` always reads keys and values from the KV pool. For `attn_mha`
that pool holds the latent ([slots, 1, kv_lora_rank + qk_rope_head_dim]), not the expanded keys:
the MHA form fails on a shape check (or, if the widths happen to agree, attends over the wrong
tensors). The GPU backends attend over the keys and values they are given (a ragged prefill).
This does the same: causal attention of each request's new tokens over its own new keys and
values, the form SGLang picks on GPUs kept as it is.
"""

from __future__ import annotations

import torch
from torch.nn.functional import scaled_dot_product_attention


def is_mla_mha_form(backend, layer, save_kv_cache: bool) -> bool:
    """The MHA form of an MLA layer: its `attn_mha` (which DeepseekV2AttentionMLA marks with a
    `kv_b_proj` attribute) over an MLA latent pool, with keys and values not to be cached."""
    if save_kv_cache or not hasattr(layer, "kv_b_proj"):
        return False
    return hasattr(backend.token_to_kv_pool, "kv_lora_rank")


def ragged_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_lens: list[int], scaling: float | None
) -> torch.Tensor:
    """Causal attention within each of the packed sequences `seq_lens`.

    q/k: [tokens, heads, qk_dim], v: [tokens, heads, v_dim]; returns [tokens, heads, v_dim].
    """
    out = q.new_empty(q.shape[0], q.shape[1], v.shape[-1])
    start = 0
    for length in seq_lens:
        rows = slice(start, start + length)
        o = scaled_dot_product_attention(
            q[rows].transpose(0, 1), k[rows].transpose(0, 1), v[rows].transpose(0, 1),
            is_causal=True, scale=scaling,
        )  # fmt: skip
        out[rows] = o.transpose(0, 1)
        start += length
    return out


def forward_mha_form(q, k, v, layer, forward_batch) -> torch.Tensor:
    """TorchNativeAttnBackend.forward_extend for the MHA form of MLA (no cached prefix)."""
    prefix_lens = forward_batch.extend_prefix_lens_cpu
    if prefix_lens is not None and any(prefix_lens):
        # SGLang's dispatch sends a batch with a cached prefix to the absorbed form.
        raise NotImplementedError("dflash_sglang CPU MLA: the MHA form over a cached prefix is not supported")
    if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
        raise NotImplementedError("dflash_sglang CPU MLA: sliding-window MLA is not supported")
    heads = layer.tp_q_head_num
    out = ragged_causal_attention(
        q.reshape(-1, heads, layer.qk_head_dim),
        k.reshape(-1, layer.tp_k_head_num, layer.qk_head_dim),
        v.reshape(-1, layer.tp_v_head_num, layer.v_head_dim),
        [int(n) for n in forward_batch.extend_seq_lens_cpu],
        layer.scaling,
    )
    return out.reshape(-1, heads * layer.v_head_dim)
