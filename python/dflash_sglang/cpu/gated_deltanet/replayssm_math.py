"""The math of GDN ReplaySSM spec-verify in plain torch (used by replayssm.py), float32.

A request's state is a frozen checkpoint S0 plus a ring of its last committed steps' records
(d_t, k_t, g_t): d_t the delta-rule update vector, k_t the normalised key, g_t the log-decay, so that

    S = exp(G) S0 + sum_t exp(G - G_t) d_t k_t^T        G_t = g_1 + ... + g_t, G the sum of all

is the state after those steps (delta_rule.py's recurrence unrolled: S_t = exp(g_t) S_{t-1} + d_t k_t^T
with d_t = beta_t (v_t - exp(g_t) S_{t-1} k_t)). The verify rebuilds the state at the window's start
that way and runs the recurrence over the window, keeping every d_t; the commit folds the records
into the checkpoint (or into a track slot). States are [.., HV, V, K] as in SGLang's pools.
"""

from __future__ import annotations

import torch


def per_value_head(x: torch.Tensor, heads_v: int) -> torch.Tensor:
    """[.., H, D] key-head tensors repeated to the HV value heads (value head h reads key head
    h // (HV // H)), along dim -2."""
    return x.repeat_interleave(heads_v // x.shape[-2], dim=-2)


def fold_records(states, updates, keys, gates, counts, split_dtype=None, order=None):
    """exp(G) S + sum_{t < count} exp(G - G_t) d_t k_t^T for every row.

    states [N, HV, V, K]; updates [N, HV, T, V]; keys [N, HV, T, K]; gates [N, HV, T]; counts [N]
    (records at t >= count are left out). `order` [N, T], when given, is each lane's place in its
    row's sequence (a ring read in its physical order: lane j holds record order[j]); without it
    lane t holds record t. With `split_dtype`, each decayed update is carried as a high part in
    that dtype plus the rounded low remainder, as SGLang's commit kernel does.
    """
    place = torch.arange(gates.shape[-1]) if order is None else order[:, None, :]
    active = place < counts.reshape(-1, 1, 1)
    gates = torch.where(active, gates.float(), 0.0)
    if order is None:
        prefix = gates.cumsum(-1)
    else:  # the sum over the lanes at or before each lane's place, in any lane order
        before = (order[:, None, :] <= order[:, :, None]).float()  # [N, lane, earlier lane]
        prefix = gates @ before.transpose(-1, -2)
    total = gates.sum(-1)
    decay = torch.where(active, (total[..., None] - prefix).exp(), 0.0)
    scaled = updates.float() * decay[..., None]
    if split_dtype is not None and split_dtype != torch.float32:
        high = scaled.to(split_dtype)
        scaled = high.float() + (scaled - high.float()).to(split_dtype).float()
    return states.float() * total.exp()[..., None, None] + scaled.transpose(-1, -2) @ keys.float()


def recurrent_window(states, q, k, v, g, beta, valid):
    """The gated delta rule over a padded window of every row, from `states` [N, HV, V, K].

    q (normalised and scaled), k (normalised): [N, T, HV, K], already per value head; v [N, T, HV, V];
    g, beta [N, T, HV]; valid [N, T] (a row's steps past its length leave its state alone).
    Returns (o [N, T, HV, V], d [N, T, HV, V] the update vectors, final states), float32.
    """
    # Everything that does not depend on the state is computed once for the window: on a small
    # model each step's cost is the count of torch calls, not their arithmetic.
    S = states.float().clone()
    n, steps, heads_v, value_dim = v.shape
    decay = g.float().exp()[..., None, None]
    key_cols, query_cols = k.float()[..., None], q.float()[..., None]
    key_rows = k.float().reshape(n, steps, heads_v, 1, -1)
    v, beta = v.float(), beta.float()[..., None]
    out = torch.empty(n, steps, heads_v, value_dim, 1)
    updates = torch.empty(n, steps, heads_v, value_dim)
    ragged = (~valid).any(0).tolist()  # the steps some row does not take
    for t in range(steps):
        new = S * decay[:, t]
        d = (v[:, t] - (new @ key_cols[:, t]).squeeze(-1)) * beta[:, t]
        new = new.addcmul_(d[..., None], key_rows[:, t])
        torch.matmul(new, query_cols[:, t], out=out[:, t])
        updates[:, t] = d
        S = torch.where(valid[:, t, None, None, None], new, S) if ragged[t] else new
    return out.squeeze(-1), updates, S


def exact_fold(states, raw_k, raw_v, gates, betas, counts, qk_l2norm: bool):
    """SGLang's exact-fold replay: the recurrence over each row's first `count` raw records.

    states [N, HV, V, K]; raw_k [N, HV, T, K] (pre-norm, per value head); raw_v [N, HV, T, V];
    gates, betas [N, HV, T]. Returns the states after the records, float32.
    """
    S = states.float().clone()
    for t in range(raw_k.shape[2]):
        key = raw_k[:, :, t].float()
        if qk_l2norm:
            key = key / torch.sqrt((key * key).sum(-1, keepdim=True) + 1e-6)
        decayed = S * gates[:, :, t].float().exp()[..., None, None]
        d = (raw_v[:, :, t].float() - (decayed @ key[..., None]).squeeze(-1)) * betas[:, :, t, None].float()
        S = torch.where((t < counts).reshape(-1, 1, 1, 1), decayed + d[..., None] * key[..., None, :], S)
    return S
