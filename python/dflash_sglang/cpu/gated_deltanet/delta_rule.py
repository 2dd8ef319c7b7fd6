"""The gated delta rule (Gated DeltaNet's linear attention) in plain torch, in SGLang's state layout.

One step for every value head h, with the state S_h of shape [V, K] (float32):

    S_h <- exp(g_t,h) * S_h                  decay
    u    = beta_t,h * (v_t,h - S_h k_t)      the part of v the state does not predict yet
    S_h <- S_h + u k_t^T                     write it (the delta rule)
    o_t,h = S_h (scale * q_t)                read

q and k are L2-normalised first (SGLang always asks for it), and value head h reads key head
h // (HV // H). The decay and write strength come from the layer's gates:
g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b).

SGLang's state pools hold S as [slot, HV, V, K]; transformers' references (qwen3_5, qwen3_next)
keep [batch, HV, K, V], the transpose. This module is the one definition every CPU stand-in of the
GDN kernels runs (the chunked prefill kernel computes the same recurrence, reordered).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

L2_EPS = 1e-6  # the kernels' `use_qk_l2norm_in_kernel` epsilon


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gdn_gates(A_log, a, b, dt_bias, softplus_beta: float = 1.0, threshold: float = 20.0):
    """(g, beta) in float32: the log-space decay and the write strength of every step and head."""
    softplus = F.softplus(a.float() + dt_bias.float(), beta=softplus_beta, threshold=threshold)
    return -A_log.float().exp() * softplus, b.float().sigmoid()


def gated_delta_rule(q, k, v, g, beta, state, scale: float, qk_l2norm: bool = True, keep_every: int = 0):
    """Run the recurrence over N sequences of T steps each.

    q, k: [N, T, H, K]; v: [N, T, HV, V]; g, beta: [N, T, HV]; state: [N, HV, V, K] (read as float32).
    Returns (o [N, T, HV, V], final state [N, HV, V, K], kept) in float32, where `kept` stacks the
    state after every `keep_every`-th step ([N, T // keep_every, HV, V, K]; None when 0).
    """
    q, k, v, g, beta = _per_value_head(q, k, v, g, beta, scale, qk_l2norm)
    S = state.float().clone()
    out = torch.empty_like(v)
    kept = []
    for t in range(v.shape[1]):
        S, out[:, t] = _step(S, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        if keep_every and (t + 1) % keep_every == 0:
            kept.append(S)
    return out, S, (torch.stack(kept, dim=1) if kept else S.new_empty(S.shape[0], 0, *S.shape[1:]))


def gated_delta_rule_tree(q, k, v, g, beta, state, scale: float, qk_l2norm: bool, parents: torch.Tensor):
    """The recurrence over N draft trees of T nodes each, in the kernels' node order: node 0 starts
    from `state`, node t > 0 from the state after its parent (`parents` [N, T], parent < t; SGLang's
    `retrieve_parent_token`, whose padding nodes hang off node 0). Shapes as gated_delta_rule.

    Returns (o [N, T, HV, V], the state after every node [N, T, HV, V, K]), float32.
    """
    q, k, v, g, beta = _per_value_head(q, k, v, g, beta, scale, qk_l2norm)
    n, steps = v.shape[:2]
    kept = state.new_empty(n, steps, *state.shape[1:], dtype=torch.float32)
    out = torch.empty_like(v)
    rows = torch.arange(n)
    for t in range(steps):
        S = state.float() if t == 0 else kept[rows, parents[:, t].long()]
        kept[:, t], out[:, t] = _step(S, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
    return out, kept


def _per_value_head(q, k, v, g, beta, scale: float, qk_l2norm: bool):
    """float32 inputs, q and k normalised and repeated to the value heads, q scaled."""
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    group = v.shape[2] // k.shape[2]
    return q.repeat_interleave(group, dim=2) * scale, k.repeat_interleave(group, dim=2), v, g, beta


def _step(S, q, k, v, g, beta):
    """One token for every row and value head: (the new state, the output)."""
    S = S * g.exp()[..., None, None]
    u = (v - (S @ k[..., None]).squeeze(-1)) * beta[..., None]
    S = S + u[..., None] * k[..., None, :]
    return S, (S @ q[..., None]).squeeze(-1)


def sequence_bounds(cu_seqlens, num_rows: int, rows_len: int) -> list[tuple[int, int]]:
    """[start, end) of every sequence in the flattened token axis: from `cu_seqlens`, or, without it,
    `num_rows` rows of `rows_len` tokens each (the kernels' two input conventions)."""
    if cu_seqlens is None:
        return [(n * rows_len, (n + 1) * rows_len) for n in range(num_rows)]
    starts = cu_seqlens.tolist()
    return list(zip(starts[:-1], starts[1:], strict=True))


def read_states(pool, slots: torch.Tensor, shape) -> torch.Tensor:
    """pool[slots[i]] as float32; zeros where the slot is negative (a padding row) or there is no pool."""
    states = torch.zeros(len(slots), *shape, dtype=torch.float32)
    if pool is not None:
        valid = slots >= 0
        states[valid] = pool[slots[valid]].float()
    return states


def write_states(pool, slots: torch.Tensor, states: torch.Tensor) -> None:
    """pool[slots[i]] = states[i] in the pool's dtype, skipping negative slots."""
    valid = slots >= 0
    pool[slots[valid]] = states[valid].to(pool.dtype)


def gated_delta_rule_varlen(q, k, v, g, beta, states, bounds, scale: float, qk_l2norm=True, keep_every=0):
    """The recurrence over packed sequences: q, k [tokens, H, K], v [tokens, HV, V], g, beta
    [tokens, HV], `states` [N, HV, V, K] the initial state of each sequence in `bounds`.

    Returns (o [tokens, HV, V], final states [N, HV, V, K], kept states per sequence), float32; tokens
    outside every sequence (padding) read zeros. Equal lengths (decode, verify) run as one batch.
    """
    out = torch.zeros(v.shape, dtype=torch.float32)
    if not bounds:
        return out, states, []
    lengths = {end - start for start, end in bounds}
    if len(lengths) == 1 and bounds[0][0] == 0:
        n, length = len(bounds), lengths.pop()

        def rows(x):
            return x[: n * length].reshape(n, length, *x.shape[1:])

        o, finals, kept = gated_delta_rule(
            *map(rows, (q, k, v, g, beta)), states, scale, qk_l2norm, keep_every
        )
        out[: n * length] = o.flatten(0, 1)
        return out, finals, list(kept)
    finals, kept = [], []
    for i, (start, end) in enumerate(bounds):
        o, final, kept_i = gated_delta_rule(
            *(x[None, start:end] for x in (q, k, v, g, beta)), states[i : i + 1], scale, qk_l2norm, keep_every
        )
        out[start:end] = o[0]
        finals.append(final)
        kept.append(kept_i[0])
    return out, torch.cat(finals), kept
