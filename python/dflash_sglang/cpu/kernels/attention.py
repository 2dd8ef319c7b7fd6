"""SGLang's torch_native attention backend on CPU: TARGET_VERIFY, attention sinks, MLA prefill.

TARGET_VERIFY. DFLASH runs two forwards in `ForwardMode.TARGET_VERIFY`: the draft block
(non-causal for `AttentionType.ENCODER_ONLY` layers, causal within a window for sliding draft
layers) and the target's verify of that block (causal). `TorchNativeAttnBackend.forward_extend`
has no such mode: it expects `extend_prefix_lens`/`extend_seq_lens`, which a verify batch does not
carry. In TARGET_VERIFY each request has `seq_lens[i]` committed tokens in its KV and `n` query
tokens (the block) at positions `seq_lens[i] .. seq_lens[i] + n - 1`; their KV slots are
`out_cache_loc[i*n:(i+1)*n]`, also written to `req_to_token[row, seq_lens[i]:seq_lens[i] + n]`.

Attention sinks (gpt-oss: `GptOssAttention` passes `sinks=`, one learned logit per query head).
torch_native's `forward_extend`/`forward_decode` take no `sinks` argument. A sink is one more
logit in each head's softmax that takes probability mass and contributes no value:
p_j = exp(s_j) / (exp(sink) + sum_k exp(s_k)), out = sum_j p_j v_j. For CPU tensors these hooks
compute it in extend, decode and verify, with torch_native's masks (causal, sliding window).

With a hybrid SWA pool (`SWAKVPool`, SGLang's default for gpt-oss), the sliding layers' KV lives
in a pool of its own, addressed by `translate_loc_from_full_to_swa` of the request's slots; the
stand-ins read it there (torch_native's own read path indexes it with full-pool slots).

The same hook also serves the MHA form of MLA prefill (DeepSeek-V2/V3), which torch_native cannot
run as it is (cpu/kernels/mla.py). An MLA target's verify takes the weight-absorbed form, one latent KV
head, through the TARGET_VERIFY path here, as its decode does through SGLang's forward_decode.
"""

from __future__ import annotations

import torch
from torch.nn.functional import scaled_dot_product_attention

from ...runtime.visibility import block_visibility as model_block_visibility
from . import mla

TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"
DECODE_TARGET = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_decode"
PLAN_CACHE_ATTR = "_dflash_attention_plans"  # on a ForwardBatch: its layers' shared request_plans


def block_visibility(prefix_len: int, block_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """[block_len, prefix_len + block_len] bool, True where a block query may see a key.

    `window` follows SGLang's `sliding_window_size` (window_left: keys q-window .. q), one less
    than the HF window the drafter's own mask (`model.block_visibility`) takes.
    """
    q_pos = torch.arange(prefix_len, prefix_len + block_len)
    k_pos = torch.arange(prefix_len + block_len)
    hf_window = window + 1 if window is not None and window > -1 else None
    return model_block_visibility(q_pos, k_pos, hf_window, causal)


def sink_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    sinks: torch.Tensor,
) -> torch.Tensor:
    """Softmax attention with one sink logit per query head.

    q: [heads, q_len, dim]; k/v: [kv_heads, k_len, dim] (grouped-query heads share a kv head);
    mask: [q_len, k_len] bool, True where visible, or None (all); sinks: [heads]. Returns
    [heads, q_len, v_dim].
    """
    group = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    scores = (q @ k.transpose(-1, -2)) * scale
    if mask is not None:  # None: every key visible (request_mask)
        scores = scores.masked_fill(~mask, float("-inf"))
    sink = sinks.to(scores.dtype).view(-1, 1, 1).expand(-1, q.shape[1], 1)
    probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return probs @ v


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    query_lens: list[int],
    *,
    scaling: float | None,
    causal: bool,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
    to_pool_slots=None,
    tree_mask: torch.Tensor | None = None,
    plan_cache: dict | None = None,
) -> torch.Tensor:
    """Attention of each request's queries (the `query_lens[i]` tokens after its `prefix_lens[i]`
    cached ones) over its prefix and its own new KV.

    q: [sum(query_lens), q_heads, head_dim]; k/v_cache: [slots, kv_heads, dim] (new KV already
    written); `to_pool_slots` maps req_to_token slots to the layer's pool (SWA pools).
    `tree_mask` (a tree verify, SGLang's QLEN_ONLY layout: bs x n x n allowed pairs among the new
    tokens, flat; n_i x n_i each with per-request lengths) replaces their causal mask: each sees
    the prefix, its ancestors and itself.
    `plan_cache`: a dict that lives as long as one forward (request_plans).
    Returns [sum(query_lens), q_heads, v_dim].
    """
    if tree_mask is not None:
        if window is not None and window > -1:
            raise NotImplementedError("dflash_sglang CPU TARGET_VERIFY: tree masks on sliding-window layers")
        tree_mask = request_tree_masks(tree_mask, query_lens)
    out = q.new_empty(q.shape[0], q.shape[1], v_cache.shape[-1])
    gqa = q.shape[1] != k_cache.shape[1]
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    start = 0
    plans = request_plans(req_to_token, req_pool_indices, prefix_lens, query_lens, causal, window,
                          to_pool_slots, tree_mask, plan_cache)  # fmt: skip
    for n, (slots, mask) in zip(query_lens, plans, strict=True):
        # [heads, tokens, dim], the layout SDPA wants per request.
        q_i = q[start : start + n].transpose(0, 1)
        k_i = k_cache[slots].to(q.dtype).transpose(0, 1)
        v_i = v_cache[slots].to(q.dtype).transpose(0, 1)
        if sinks is None:
            o_i = scaled_dot_product_attention(q_i, k_i, v_i, attn_mask=mask, scale=scaling, enable_gqa=gqa)
        else:
            o_i = sink_attention(q_i, k_i, v_i, mask, scale, sinks)
        out[start : start + n] = o_i.transpose(0, 1)
        start += n
    return out


def request_plans(req_to_token, req_pool_indices, prefix_lens, query_lens, causal, window, to_pool_slots,
                  tree_mask, plan_cache: dict | None) -> list[tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """Each request's KV slots and visibility mask. They are the same in every layer of one
    forward (given the window and the pool), so a forward's `plan_cache` computes them once (one
    layer's verify attention for the tiny pair: 95 -> 70 us). The key holds everything they are
    computed from, req_to_token's version included where it keeps one."""
    rows, prefixes = req_pool_indices.tolist(), prefix_lens.tolist()
    key = None
    if plan_cache is not None:
        tree = None if tree_mask is None else (tree_mask[0].data_ptr(), _version(tree_mask[0]))
        key = (causal, window, to_pool_slots is not None, tree, tuple(rows), tuple(prefixes),
               tuple(query_lens), _version(req_to_token))  # fmt: skip
        if key in plan_cache:
            return plan_cache[key]
    plans = []
    for i, (row, prefix, n) in enumerate(zip(rows, prefixes, query_lens, strict=True)):
        slots = req_to_token[row, : prefix + n].long()
        if to_pool_slots is not None:
            slots = to_pool_slots(slots).long()
        if tree_mask is None:
            mask = request_mask(prefix, n, causal, window, req_to_token.device)
        else:
            mask = torch.cat([tree_mask[i].new_ones(n, prefix), tree_mask[i]], dim=1)
        plans.append((slots, mask))
    if key is not None:
        plan_cache[key] = plans
    return plans


def request_tree_masks(flat: torch.Tensor, query_lens: list[int]) -> list[torch.Tensor]:
    """SGLang's QLEN_ONLY tree mask, flat, -> each request's [n_i, n_i] among its own nodes. With
    per-request lengths (step/ragged.py) request i's block is its first n_i nodes, n_i^2 cells."""
    cells = [n * n for n in query_lens]
    if sum(cells) != flat.numel():
        raise ValueError(f"tree mask of {flat.numel()} cells for query lengths {query_lens}")
    return [part.view(n, n) for part, n in zip(flat.split(cells), query_lens, strict=True)]


def request_mask(prefix_len: int, block_len: int, causal: bool, window: int | None, device):
    """A request's visibility mask, or None where every key is visible: one causal query (a
    width-1 verify, as a decode) or a non-causal block (the drafter's), without a window. SDPA's
    mask-free path then runs, as torch_native's decode does: a width-1 verify's attention at
    batch 16 took 0.77-0.80x its time with all-True masks (docs/journal/adaptive.md)."""
    if window is None and (block_len == 1 or not causal):
        return None
    if window is None:  # causal: query i sees keys 0 .. prefix + i, in two ops
        return torch.ones(block_len, prefix_len + block_len, dtype=torch.bool, device=device).tril(prefix_len)
    return block_visibility(prefix_len, block_len, causal, window).to(device)


def _version(tensor: torch.Tensor) -> int | None:
    """In-place writes bump a tensor's version; inference tensors (made under inference_mode, as
    a step's tree masks are) keep none, and within one forward they do not change."""
    return None if tensor.is_inference() else tensor._version


def tokens_per_request(forward_batch, num_tokens: int) -> int:
    """The block length of a verify batch, as SGLang's other backends read it."""
    spec_info = forward_batch.spec_info
    n = getattr(spec_info, "num_tokens_per_req", -1) if spec_info is not None else -1
    if n is None or n <= 0:
        n = getattr(spec_info, "draft_token_num", None) or num_tokens // forward_batch.batch_size
    if n * forward_batch.batch_size != num_tokens:
        raise ValueError(f"TARGET_VERIFY: {num_tokens} query tokens is not {forward_batch.batch_size} x {n}")
    return int(n)


def _pool_slots(backend, layer):
    """None for a plain pool; for a sliding layer of a hybrid SWA pool, the slot translation."""
    pool = backend.token_to_kv_pool
    if not getattr(backend, "use_sliding_window_kv_pool", False):
        return None
    _, is_swa_layer = pool.layers_mapping[layer.layer_id]
    return pool.translate_loc_from_full_to_swa if is_swa_layer else None


def _save_kv(backend, layer, forward_batch, k, v, save_kv_cache: bool) -> None:
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    if save_kv_cache and k is not None and v is not None:
        loc = KVWriteLoc(forward_batch.out_cache_loc, backend.swa_out_cache_loc)
        backend.token_to_kv_pool.set_kv_buffer(layer, loc, k, v)


def _refuse_unsupported(layer, forward_batch, what: str) -> None:
    if layer.is_cross_attention or getattr(forward_batch, "encoder_lens", None) is not None:
        raise NotImplementedError(f"dflash_sglang CPU {what}: cross attention / encoders are not supported")


def _window(layer, causal: bool) -> int | None:
    """As torch_native: a window (window_left) for causal, non-cross layers that have one."""
    window = layer.sliding_window_size
    return window if causal and window is not None and window > -1 else None


def _attend(backend, q, layer, forward_batch, prefix_lens, query_lens, *, causal, sinks, tree_mask=None):
    q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
    out = paged_attention(
        q_,
        backend.token_to_kv_pool.get_key_buffer(layer.layer_id),
        backend.token_to_kv_pool.get_value_buffer(layer.layer_id),
        backend.req_to_token_pool.req_to_token,
        forward_batch.req_pool_indices,
        prefix_lens,
        query_lens,
        scaling=layer.scaling,
        causal=causal,
        window=_window(layer, causal),
        sinks=sinks,
        to_pool_slots=_pool_slots(backend, layer),
        tree_mask=tree_mask,
        plan_cache=forward_batch.__dict__.setdefault(PLAN_CACHE_ATTR, {}),
    )
    return out.reshape(q_.shape[0], layer.tp_q_head_num * layer.v_head_dim)


def forward_target_verify(backend, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
    """TorchNativeAttnBackend.forward_extend for ForwardMode.TARGET_VERIFY."""
    from sglang.srt.layers.radix_attention import AttentionType

    if layer.is_cross_attention:
        raise NotImplementedError("dflash_sglang CPU TARGET_VERIFY: cross attention is not supported")
    _save_kv(backend, layer, forward_batch, k, v, save_kv_cache)
    # As SGLang's extend path: the window applies to causal (decoder) layers only.
    causal = layer.attn_type != AttentionType.ENCODER_ONLY
    ragged = getattr(forward_batch.spec_info, "ragged_verify_layout", None)  # per-request lengths
    if ragged is not None:
        query_lens = list(ragged.verify_lens_cpu)
    else:
        n = tokens_per_request(forward_batch, q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim).shape[0])
        query_lens = [n] * forward_batch.batch_size
    prefix_lens = forward_batch.seq_lens
    tree_mask = getattr(forward_batch.spec_info, "custom_mask", None)  # a tree verify (tree/verify.py)
    return _attend(
        backend,
        q,
        layer,
        forward_batch,
        prefix_lens,
        query_lens,
        causal=causal,
        sinks=sinks,
        tree_mask=tree_mask,
    )


def forward_extend_with_sinks(backend, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
    """TorchNativeAttnBackend.forward_extend (prefill, chunked prefill, radix hits) with sinks."""
    from sglang.srt.layers.radix_attention import AttentionType

    _refuse_unsupported(layer, forward_batch, "attention sinks")
    _save_kv(backend, layer, forward_batch, k, v, save_kv_cache)
    causal = layer.attn_type != AttentionType.ENCODER_ONLY
    query_lens = forward_batch.extend_seq_lens.tolist()
    prefix_lens = forward_batch.extend_prefix_lens
    return _attend(backend, q, layer, forward_batch, prefix_lens, query_lens, causal=causal, sinks=sinks)


def forward_decode_with_sinks(backend, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None):
    """TorchNativeAttnBackend.forward_decode with sinks: one query per request, at its last
    position (seq_lens[i] - 1; its KV is written first)."""
    _refuse_unsupported(layer, forward_batch, "attention sinks")
    _save_kv(backend, layer, forward_batch, k, v, save_kv_cache)
    query_lens = [1] * forward_batch.batch_size
    prefix_lens = forward_batch.seq_lens - 1
    return _attend(backend, q, layer, forward_batch, prefix_lens, query_lens, causal=True, sinks=sinks)


def forward_extend_on_cpu(original, backend, q, k, v, layer, forward_batch, *args, **kwargs):
    """AROUND TorchNativeAttnBackend.forward_extend: for CPU tensors, add TARGET_VERIFY, attention
    sinks and the MHA form of MLA prefill (cpu/kernels/mla.py); everything else is SGLang's."""
    if q.device.type != "cpu":
        return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    if forward_batch.forward_mode.is_target_verify():
        return forward_target_verify(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    save_kv_cache = kwargs.get("save_kv_cache", args[0] if args else True)
    if mla.is_mla_mha_form(backend, layer, save_kv_cache):
        return mla.forward_mha_form(q, k, v, layer, forward_batch)
    if kwargs.get("sinks") is not None:
        return forward_extend_with_sinks(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    kwargs.pop("sinks", None)  # None: no sinks, what SGLang's own path computes
    return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)


def forward_decode_on_cpu(original, backend, q, k, v, layer, forward_batch, *args, **kwargs):
    """AROUND TorchNativeAttnBackend.forward_decode: attention sinks for CPU tensors."""
    if q.device.type != "cpu":
        return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    if kwargs.get("sinks") is not None:
        return forward_decode_with_sinks(backend, q, k, v, layer, forward_batch, *args, **kwargs)
    kwargs.pop("sinks", None)
    return original(backend, q, k, v, layer, forward_batch, *args, **kwargs)
