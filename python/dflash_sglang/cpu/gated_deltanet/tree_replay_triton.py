"""The Triton twin of tree_replay.py's gdn_tree_replay_verify: a draft tree's GDN verify through a
ReplaySSM ring, with records per node and no state per node.

One program per (request, value head, V tile). It folds the ring history [base, base + wp) into the
start-state tile S0 [BV, K] (kept in registers, as SGLang's gdn_replayssm_spec_decode.py folds its
history), then walks the nodes in order. For node t it walks the parent pointers up to the root,
summing exp(G_par - G_a) d_a (k_a . x) over the ancestors a for x = k_t and q_t, to get S_par k_t and
S_par q_t; then d_t = beta_t (v_t - exp(g_t) S_par k_t) and out_t = exp(g_t) S_par q_t + d_t (k_t . q_t).
The ancestors' d tiles are reloaded from an fp32 scratch [T, HV, V] (one record per node, like
`out`): a 16-bit ring lane would round the d every descendant reads, and lanes past L do not exist.
k_a and g_a are recomputed from the inputs. Node t's record goes to ring lane
(base + wp + t) & (L - 1) when wp + t < L (high parts in the ring's dtype, low parts in rawv/rawk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gates(a, b, A_log, dt_bias, token, i_hv, HV: tl.constexpr):
    """(g, beta) of one token and value head, as delta_rule.gdn_gates (softplus threshold 20)."""
    x = tl.load(a + token * HV + i_hv).to(tl.float32) + tl.load(dt_bias + i_hv).to(tl.float32)
    softplus = tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
    g = -tl.exp(tl.load(A_log + i_hv).to(tl.float32)) * softplus
    beta = 1.0 / (1.0 + tl.exp(-tl.load(b + token * HV + i_hv).to(tl.float32)))
    return g, beta


@triton.jit
def _unit(x, NORM: tl.constexpr):
    if NORM:
        x = x / tl.sqrt(tl.sum(x * x, axis=0) + 1e-6)
    return x


@triton.jit
def _tree_replay_kernel(
    q, k, v, a, b, A_log, dt_bias, h0, d_cache, k_cache, g_cache, rawv_cache, rawk_cache, out, scratch,
    query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base, parents, scale,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
    BC: tl.constexpr, L: tl.constexpr, NORM: tl.constexpr, LOW_PARTS: tl.constexpr,
    NULL_BLOCK_ID: tl.constexpr,
):  # fmt: skip
    i_n, i_hv, i_v = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_h = i_hv // (HV // H)
    o_v = i_v * BV + tl.arange(0, BV)
    o_k = tl.arange(0, K)
    o_c = tl.arange(0, BC)
    bos = tl.load(query_start_loc + i_n).to(tl.int64)
    eos = tl.load(query_start_loc + i_n + 1).to(tl.int64)
    slot = tl.load(ssm_state_indices + i_n).to(tl.int64)
    if slot <= NULL_BLOCK_ID:
        for t in range(bos, eos):
            tl.store(out + (t * HV + i_hv) * V + o_v, tl.zeros([BV], tl.float32).to(out.dtype.element_ty))
        return
    row = tl.load(replay_indices + i_n).to(tl.int64)
    wp = tl.load(write_pos + row).to(tl.int64)
    base = tl.load(cache_base + row).to(tl.int64)

    # The start state: checkpoint tile + history records [base, base + wp), decayed to the end.
    state = tl.load(h0 + ((slot * HV + i_hv) * V + o_v[:, None]) * K + o_k[None, :]).to(tl.float32)
    history = o_c < wp
    lanes = (base + o_c) & (L - 1)
    g_hist = tl.load(g_cache + (row * HV + i_hv) * L + lanes, mask=history, other=0.0).to(tl.float32)
    g_total = tl.sum(g_hist, axis=0)
    decay = tl.where(history, tl.exp(g_total - tl.cumsum(g_hist, axis=0)), 0.0)
    d_hist = tl.load(
        d_cache + ((row * HV + i_hv) * L + lanes[None, :]) * V + o_v[:, None],
        mask=history[None, :],
        other=0.0,
    ).to(tl.float32)
    k_hist = tl.load(
        k_cache + ((row * H + i_h) * L + lanes[:, None]) * K + o_k[None, :], mask=history[:, None], other=0.0
    ).to(tl.float32)
    state = tl.exp(g_total) * state + tl.dot(d_hist * decay[None, :], k_hist, input_precision="ieee")

    write_k = (i_v == 0) & (i_hv == i_h * (HV // H))  # one program writes each key head's record
    for t in range(0, eos - bos):
        token = bos + t
        q_t = _unit(tl.load(q + (token * H + i_h) * K + o_k).to(tl.float32), NORM) * scale
        k_t = _unit(tl.load(k + (token * H + i_h) * K + o_k).to(tl.float32), NORM)
        g_t, beta_t = _gates(a, b, A_log, dt_bias, token, i_hv, HV)
        # Walk the parent's path up to the root: path_decay ends at G_par.
        par_k = tl.zeros([BV], tl.float32)
        par_q = tl.zeros([BV], tl.float32)
        path_decay = tl.full([], 0.0, tl.float32)
        node = tl.load(parents + token).to(tl.int64)
        while node >= 0:
            ancestor = bos + node
            k_a = _unit(tl.load(k + (ancestor * H + i_h) * K + o_k).to(tl.float32), NORM)
            g_a, _ = _gates(a, b, A_log, dt_bias, ancestor, i_hv, HV)
            d_a = tl.load(scratch + (ancestor * HV + i_hv) * V + o_v)
            weight = tl.exp(path_decay)
            par_k += weight * tl.sum(k_a * k_t, axis=0) * d_a
            par_q += weight * tl.sum(k_a * q_t, axis=0) * d_a
            path_decay += g_a
            node = tl.load(parents + ancestor).to(tl.int64)
        start_weight = tl.exp(path_decay)
        par_k += start_weight * tl.sum(state * k_t[None, :], axis=1)
        par_q += start_weight * tl.sum(state * q_t[None, :], axis=1)
        v_t = tl.load(v + (token * HV + i_hv) * V + o_v).to(tl.float32)
        d_t = beta_t * (v_t - tl.exp(g_t) * par_k)
        o_t = tl.exp(g_t) * par_q + tl.sum(k_t * q_t, axis=0) * d_t
        tl.store(out + (token * HV + i_hv) * V + o_v, o_t.to(out.dtype.element_ty))
        tl.store(scratch + (token * HV + i_hv) * V + o_v, d_t)
        tl.debug_barrier()  # a descendant reloads this tile, each element from another thread

        if wp + t < L:
            lane = (base + wp + t) & (L - 1)
            p_d = d_cache + ((row * HV + i_hv) * L + lane) * V + o_v
            d_high = d_t.to(p_d.dtype.element_ty)
            tl.store(p_d, d_high)
            if LOW_PARTS:
                tl.store(rawv_cache + ((row * HV + i_hv) * L + lane) * V + o_v, d_t - d_high.to(tl.float32))
            if i_v == 0:
                tl.store(g_cache + (row * HV + i_hv) * L + lane, g_t)
            if write_k:
                p_k = k_cache + ((row * H + i_h) * L + lane) * K + o_k
                k_high = k_t.to(p_k.dtype.element_ty)
                tl.store(p_k, k_high)
                if LOW_PARTS:
                    k_low = (k_t - k_high.to(tl.float32)).to(k.dtype.element_ty)
                    tl.store(rawk_cache + ((row * H + i_h) * L + lane) * K + o_k, k_low)


def gdn_tree_replay_verify_triton(
    q, k, v, a, b, A_log, dt_bias, checkpoint_state, d_cache, k_cache, g_cache, rawv_cache, rawk_cache,
    out, query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base, parents, scale=None,
    use_qk_l2norm_in_kernel=True, null_block_id=0, block_v=64, num_warps=4,
):  # fmt: skip
    """tree_replay.gdn_tree_replay_verify on the device of the tensors (CPU ones under
    TRITON_INTERPRET=1). K and V powers of two >= 16; block_v (a power of two >= 16) tiles V.
    Inputs are read contiguous ([T, H, K], [T, HV, V], [T, HV] and SGLang's ring layouts)."""
    _, heads_v, dim_v, dim_k = checkpoint_state.shape
    L, heads = d_cache.shape[2], k.shape[1]
    for name, size in (("K", dim_k), ("V", dim_v), ("L", L)):
        if size & (size - 1) or (size < 16 and name != "L"):
            raise ValueError(f"tree replay verify: {name}={size} must be a power of two (K, V >= 16)")
    block_v = min(block_v, dim_v)
    tensors = [q, k, v, a, b, checkpoint_state, d_cache, k_cache, g_cache, out, parents]
    if not all(x.is_contiguous() for x in tensors):
        raise ValueError("tree replay verify: inputs, rings and out must be contiguous")
    low_parts = rawv_cache is not None and rawk_cache is not None
    scratch = torch.empty(v.shape, dtype=torch.float32, device=v.device)  # d of every node
    requests = query_start_loc.shape[0] - 1
    if requests == 0:
        return out
    _tree_replay_kernel[(requests, heads_v, dim_v // block_v)](
        q, k, v, a, b, A_log, dt_bias, checkpoint_state, d_cache, k_cache, g_cache,
        rawv_cache if low_parts else d_cache, rawk_cache if low_parts else k_cache, out, scratch,
        query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base, parents,
        dim_k**-0.5 if scale is None else scale,
        H=heads, HV=heads_v, K=dim_k, V=dim_v, BV=block_v, BC=max(16, L), L=L,
        NORM=use_qk_l2norm_in_kernel, LOW_PARTS=low_parts, NULL_BLOCK_ID=null_block_id,
        num_warps=num_warps,
    )  # fmt: skip
    return out
