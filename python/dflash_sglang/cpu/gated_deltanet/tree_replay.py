"""A draft TREE's GDN verify through a ReplaySSM ring, in plain torch (float32 math), and the
commit-side lane move that lets SGLang's chain commit take the accepted path.

SGLang's ring verify (replayssm.py) replays a chain: the window's tokens are consecutive steps. A
tree's nodes each start from their parent's state. Keeping a state per node ([V, K] each) is what
the ring exists to avoid, so the state a node reads is rebuilt from the window's start state S0
and the records of the node's ancestors (replayssm_math.py's unrolled recurrence along the path):

    S_par x = exp(G_par) S0 x + sum_{a on the path to par} exp(G_par - G_a) d_a (k_a . x)

with G the log-decay summed along the path from the root. Each node needs S_par k_t (its delta-rule
update d_t) and S_par q_t (its output): O(nodes x depth) dot products, records per node, no state
per node. Node t's record (d_t, k_t, g_t) goes to ring lane (base + wp + t) & (L - 1) when
wp + t < L, as the chain verify writes window step t; after acceptance compact_accepted_path
moves the accepted path's records to lanes base + wp + 0, 1, ... so the chain commit folds them.
The Triton twin is tree_replay_triton.py.
"""

from __future__ import annotations

import torch

from .delta_rule import gdn_gates, l2_normalize
from .replayssm_math import fold_records, per_value_head


def gdn_tree_replay_verify(
    q, k, v, a, b, A_log, dt_bias, checkpoint_state, d_cache, k_cache, g_cache, rawv_cache, rawk_cache,
    out, query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base, parents, scale=None,
    use_qk_l2norm_in_kernel=True, null_block_id=0,
):  # fmt: skip
    """The tree verify of every request: q, k [T, H, K]; v [T, HV, V]; a, b [T, HV]; checkpoint
    [slots, HV, V, K] fp32; rings as SGLang's (d [R, HV, L, V], k [R, H, L, K], g [R, HV, L]);
    `parents` [T]: each token's parent node within its request (-1 for node 0). Requests whose
    slot is <= null_block_id get zero outputs and write nothing. Never writes the checkpoint or the
    cursors. Returns `out`."""
    L, heads_v, dim_k = d_cache.shape[2], checkpoint_state.shape[1], checkpoint_state.shape[-1]
    scale = dim_k**-0.5 if scale is None else scale
    bounds = query_start_loc.tolist()
    slots, rows = ssm_state_indices.long(), replay_indices.long()
    live = slots > null_block_id
    for i in (~live).nonzero().flatten().tolist():
        out[bounds[i] : bounds[i + 1]] = 0
    chosen = [i for i in live.nonzero().flatten().tolist() if bounds[i + 1] > bounds[i]]
    if not chosen:
        return out
    lengths = torch.tensor([bounds[i + 1] - bounds[i] for i in chosen])
    steps = torch.arange(int(lengths.max()))
    valid = steps < lengths[:, None]
    tokens = (torch.tensor([bounds[i] for i in chosen])[:, None] + steps).clamp(max=q.shape[0] - 1)
    picked = torch.tensor(chosen)
    ring_rows, base, wp = rows[picked], cache_base[rows[picked]].long(), write_pos[rows[picked]].long()

    qs, ks = q[tokens].float(), k[tokens].float()
    if use_qk_l2norm_in_kernel:
        qs, ks = l2_normalize(qs), l2_normalize(ks)
    g, beta = (x[tokens] for x in gdn_gates(A_log, a, b, dt_bias))  # [N, T, HV]
    g, beta = torch.where(valid[..., None], g, 0.0), torch.where(valid[..., None], beta, 0.0)
    start = _start_states(checkpoint_state[slots[picked]], d_cache, k_cache, g_cache, ring_rows, base, wp)
    node_parents = torch.where(valid, parents[tokens].long(), -1)
    o, d = _tree_outputs(start, qs * scale, ks, v[tokens].float(), g, beta, node_parents, heads_v)

    out[tokens[valid]] = o[valid].to(out.dtype)
    written = valid & (wp[:, None] + steps < L)
    rr, ss = written.nonzero(as_tuple=True)
    at, slot_rows = (base[rr] + wp[rr] + ss) & (L - 1), ring_rows[rr]
    d_high, k_high = d[rr, ss].to(d_cache.dtype), ks[rr, ss].to(k_cache.dtype)
    d_cache[slot_rows, :, at] = d_high
    k_cache[slot_rows, :, at] = k_high
    g_cache[slot_rows, :, at] = g[rr, ss]
    if rawv_cache is not None and rawk_cache is not None:  # low parts, as the chain verify's
        rawk_cache[slot_rows, :, at] = (ks[rr, ss] - k_high.float()).to(k.dtype).to(rawk_cache.dtype)
        rawv_cache[slot_rows, :, at] = (d[rr, ss] - d_high.float()).to(rawv_cache.dtype)
    return out


def _start_states(checkpoints, d_cache, k_cache, g_cache, rows, base, wp):
    """The checkpoint with ring history [base, base + wp) folded in: the chain verify's start state
    (high parts only, as SGLang's verify reads them)."""
    L, heads_v = d_cache.shape[2], checkpoints.shape[1]
    phys = (base[:, None] + torch.arange(L)) & (L - 1)

    def ring(cache):  # cache[rows[i], :, phys[i]] as [N, heads, L, ..]
        return cache[rows[:, None], :, phys].transpose(1, 2)

    keys = per_value_head(ring(k_cache).transpose(1, 2), heads_v).transpose(1, 2)
    return fold_records(checkpoints, ring(d_cache), keys, ring(g_cache), wp)


def _tree_outputs(start, q, k, v, g, beta, parents, heads_v):
    """(outputs [N, T, HV, V], update vectors d [N, T, HV, V]) of N padded trees from their start
    states [N, HV, V, K]; q (normalised, scaled), k (normalised) [N, T, H, K] key heads; v [N, T, HV, V];
    g, beta [N, T, HV]; parents [N, T] (-1: the start state; padding nodes hang off it, unread)."""
    n, steps = parents.shape
    q, k = per_value_head(q, heads_v), per_value_head(k, heads_v)  # [N, T, HV, K]
    start_k = torch.einsum("nhvk,nthk->nthv", start, k)  # S0 k_t and S0 q_t: [N, T, HV, V]
    start_q = torch.einsum("nhvk,nthk->nthv", start, q)
    key_key = torch.einsum("nahk,nthk->nhat", k, k)  # k_a . k_t: [N, HV, T(a), T(t)]
    key_query = torch.einsum("nahk,nthk->nhat", k, q)
    on_path = torch.zeros(n, steps, steps, dtype=torch.bool)  # on_path[t, a]: a is t or its ancestor
    path_decay = torch.zeros(n, steps, v.shape[2])  # G_t, summed along the path
    d, out = torch.zeros_like(v), torch.zeros_like(v)
    rows, eye = torch.arange(n), torch.eye(steps, dtype=torch.bool)
    for t in range(steps):
        par = parents[:, t]
        has_par = (par >= 0)[:, None]
        par_path = on_path[rows, par.clamp(min=0)] & has_par  # [N, T]
        par_decay = torch.where(has_par, path_decay[rows, par.clamp(min=0)], 0.0)  # [N, HV]
        on_path[:, t] = par_path | eye[t]
        path_decay[:, t] = par_decay + g[:, t]

        def read(x_start, dots, path, decay):  # S x for x = k_t or q_t, S the state at `decay`'s node
            weights = torch.where(path[:, None], (decay[..., None] - path_decay.transpose(1, 2)).exp(), 0.0)
            return decay.exp()[..., None] * x_start + torch.einsum("nha,nha,nahv->nhv", weights, dots, d)

        par_k = read(start_k[:, t], key_key[..., t], par_path, par_decay)
        d[:, t] = beta[:, t, :, None] * (v[:, t] - g[:, t].exp()[..., None] * par_k)
        out[:, t] = read(start_q[:, t], key_query[..., t], on_path[:, t], path_decay[:, t])
    return out, d


def compact_accepted_path(caches, replay_indices, write_pos, cache_base, accepted_nodes, null_block_id=0):
    """Move each request's accepted records into chain order: lane (base + wp + accepted_nodes[i, j])
    to lane (base + wp + j), in every layer of every ring in `caches` ([layers, R, heads, L, dim]
    for d, k and their low parts; [layers, R, HV, L] for g: the lane is dim 3 in both). Then SGLang's
    chain commit (advance by the accepted count, fold, track slots) commits the accepted path.

    accepted_nodes [N, depth]: node indices, -1 padded; the path runs root first, so node j >= j
    and a record unwritten (wp + node >= L) leaves the rest unwritten too: those lanes stay as they
    are (records the ring had no room for are lost, as in the chain verify). Rows with
    replay_indices <= null_block_id move nothing (SGLang's commit passes -1: every row >= 0 is
    live). Torch ops only, no host sync: runs on CUDA too.
    """
    if not caches or accepted_nodes.numel() == 0:
        return
    L = caches[0].shape[3]
    nodes = accepted_nodes[:, :L].long()  # lanes j < L only: the destinations never alias
    rows, depth = replay_indices.long(), nodes.shape[1]
    start = (cache_base[rows].long() + write_pos[rows].long())[:, None]
    order = torch.arange(depth, device=nodes.device)
    moved = (nodes >= 0) & (write_pos[rows].long()[:, None] + nodes < L) & (rows > null_block_id)[:, None]
    dst = (start + order) & (L - 1)
    src = torch.where(moved, (start + nodes) & (L - 1), dst)
    # Entries that move nothing repeat the first that moves (or, when none does, one lane onto
    # itself): duplicate writes of one value, and none into a row that moves nothing, which a
    # padding row -1 (the last row) or a shared null row could be.
    first = moved.flatten().to(torch.uint8).argmax()
    row_of = rows[:, None].expand_as(nodes)
    row_of, src, dst = (torch.where(moved, x, x.flatten()[first]) for x in (row_of, src, dst))
    for cache in caches:
        records = cache[:, row_of, :, src]  # gather every source before any write: paths overlap
        cache[:, row_of, :, dst] = records
