"""A ragged TARGET_VERIFY (per-request verify lengths, step/ragged.py) through the Gated DeltaNet
layers of a hybrid target, on CPU tensors, under SGLang's ReplaySSM ring (`--enable-linear-replayssm-spec`).

SGLang 0.5.23's `GDNAttnBackend.forward_extend` views a TARGET_VERIFY as [bs, draft_token_num]: it
reshapes the packed tokens to `seq_len // draft_token_num` requests of `draft_token_num` each for
the conv update. A ragged verify packs sum_i L_i tokens (request i its first L_i positions, the
layout in `forward_batch.spec_info.ragged_verify_layout`), so the reshape mixes requests. The rest
of the GDN verify already takes the layout: the hybrid backend's metadata sets `query_start_loc` to
the layout's `qo_indptr` (hybrid_linear_attn_backend `_forward_metadata`), and the ring verify
(`_replayssm_target_verify`, `gdn_replayssm_spec_decode`) is varlen by it and keeps no state per
block position, so it has no [bs, draft_token_num] snapshot layout to respect.

For CPU tensors in a ragged TARGET_VERIFY with the ring on, the hook runs what the original runs
but with the conv update by length: request i's own L_i tokens (in one call with the other requests
of its length) through SGLang's `causal_conv1d_update` (on CPU, gated_deltanet/causal_conv1d.py's
stand-in), from its conv state, its window after step s saved at `intermediate_conv_window[row_i,
s]` for s < L_i: exactly the rows the commit (`fused_conv_window_scatter_with_mask` at step
accepted - 1 <= L_i - 1) reads back. Then SGLang's own split and its `_replayssm_target_verify`
with the ragged `query_start_loc`. That is, for every request, the verify of a block of L_i run
alone (tests/cpu/test_gdn_ragged_verify.py).

Everything else, and every GPU tensor, is SGLang's original. The per-position snapshot path (ring
off) and KDA's fold path keep one width a batch: step/ragged.py refuses per-request lengths there,
and this hook raises if one reaches it. On GPUs SGLang's ring-write kernels take no ragged layout
(arg_groups/attention_hook.py refuses its own ragged verify mode with ReplaySSM), so per-request
lengths stay off on GPU hybrid targets.
"""

from __future__ import annotations

import torch

TARGET = "sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend.forward_extend"


def ring_verify_on(backend, layer_cache) -> bool:
    """Whether the GDN verify runs SGLang's compact ReplaySSM ring (`use_replayssm_spec` in
    forward_extend), not the per-position snapshots nor KDA's fold."""
    pool = backend.req_to_token_pool.mamba_pool
    return (
        getattr(layer_cache, "replayssm_d", None) is not None
        and getattr(pool, "replayssm_cache_base", None) is not None
        and not getattr(pool, "replayssm_spec_fold", False)
        and not getattr(pool, "replayssm_is_kda", False)
    )


def ragged_layout(forward_batch):
    """The step's RaggedVerifyLayout, or None (not a TARGET_VERIFY, or one width a batch)."""
    if not forward_batch.forward_mode.is_target_verify():
        return None
    return getattr(forward_batch.spec_info, "ragged_verify_layout", None)


def forward_extend_on_cpu(original, backend, layer, forward_batch, mixed_qkv, a, b, **kwargs):
    """AROUND GDNAttnBackend.forward_extend: a ragged TARGET_VERIFY on CPU tensors with the ring
    on, each request's own length through the conv update; everything else is SGLang's."""
    layout = ragged_layout(forward_batch)
    if layout is None or not isinstance(mixed_qkv, torch.Tensor) or not mixed_qkv.is_cpu:
        return original(backend, layer, forward_batch, mixed_qkv, a, b, **kwargs)
    layer_cache = backend.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
    if getattr(backend, "mis_metadata", None) is not None or not ring_verify_on(backend, layer_cache):
        raise NotImplementedError(
            "a ragged GDN verify on CPU runs only through SGLang's ReplaySSM ring "
            "(--enable-linear-replayssm-spec): the per-position snapshots take one width a batch"
        )
    metadata = backend.forward_metadata
    query_start_loc, cache_indices = metadata.query_start_loc, metadata.mamba_cache_indices
    mixed_qkv = ragged_conv_update(backend, layer, forward_batch, mixed_qkv, layer_cache, query_start_loc)
    tokens = mixed_qkv.shape[0]
    query, key, value = torch.split(mixed_qkv, [layer.q_dim, layer.k_dim, layer.v_dim], dim=-1)
    return backend._replayssm_target_verify(
        layer=layer,
        query=query.view(1, tokens, layer.num_q_heads, layer.head_q_dim),
        key=key.view(1, tokens, layer.num_k_heads, layer.head_k_dim),
        value=value.view(1, tokens, layer.num_v_heads, layer.head_v_dim),
        a=a,
        b=b,
        mamba_pool=backend.req_to_token_pool.mamba_pool,
        layer_cache=layer_cache,
        cache_indices=cache_indices,
        replay_indices=forward_batch.req_pool_indices,
        query_start_loc=query_start_loc,
        draft_token_num=forward_batch.spec_info.draft_token_num,
    )


def ragged_conv_update(backend, layer, forward_batch, mixed_qkv, layer_cache, query_start_loc):
    """[sum L_i, dim] packed inputs -> their conv outputs through SGLang's `causal_conv1d_update`,
    the requests of each length in one call; window s of request i at its verify row, step s."""
    from sglang.srt.layers.attention.linear import gdn_backend
    from sglang.srt.layers.attention.linear.utils import select_verify_intermediate_state_indices

    bounds = query_start_loc.tolist()
    bs = len(bounds) - 1
    cache_indices = backend.forward_metadata.mamba_cache_indices
    rows = select_verify_intermediate_state_indices(
        backend.verify_intermediate_state_indices,
        forward_batch.req_pool_indices,
        cache_indices[:bs] >= 0,
        backend.req_to_token_pool.size,
    )
    out = torch.zeros_like(mixed_qkv)
    lengths = [bounds[i + 1] - bounds[i] for i in range(bs)]
    for length in sorted(set(lengths) - {0}):  # one call for the requests of each length
        picked = [i for i in range(bs) if lengths[i] == length]
        tokens = torch.tensor([bounds[i] for i in picked])[:, None] + torch.arange(length)
        x = mixed_qkv[tokens].transpose(1, 2)  # [requests, dim, length]
        chosen = torch.tensor(picked)
        y = gdn_backend.causal_conv1d_update(
            x,
            layer_cache.conv[0],
            layer.conv_weights,
            layer.bias,
            layer.activation,
            conv_state_indices=cache_indices[chosen],
            intermediate_conv_window=layer_cache.intermediate_conv_window[0],
            intermediate_state_indices=rows[chosen],
        )
        out[tokens] = y.transpose(1, 2)
    return out
