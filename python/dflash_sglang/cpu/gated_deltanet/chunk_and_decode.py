"""Gated DeltaNet kernels on CPU: gating, chunked prefill, packed decode, and the verify recurrence.

SGLang's GDN backend (`layers/attention/linear/gdn_backend.py`, `kernels/gdn_triton.py`) calls four
Triton kernels; on CPU tensors each runs `delta_rule.gated_delta_rule` instead, on the same state
pool ([slot, HV, V, K]) with the same in-place writes:

- fused_gdn_gating: g and beta of a prefill (the chunked kernel takes them precomputed);
- chunk_gated_delta_rule: prefill over packed sequences; writes each final state to its slot and
  returns the states at every 64-token chunk start (`h`, read by extra_buffer's prefix tracking);
- fused_recurrent_gated_delta_rule_packed_decode: one decode step per request from the packed
  projection (q | k | v), gates computed inside;
- fused_sigmoid_gating_delta_rule_update: the recurrence over each request's tokens with gates
  computed inside; in TARGET_VERIFY it leaves the live state alone (`disable_state_update`) and
  keeps the state after every draft step in `intermediate_states_buffer[row, step]`; for a draft
  tree (`retrieve_parent_token`, filled by the conv kernel) node t starts from its parent's state.
"""

from __future__ import annotations

import torch

from .delta_rule import (
    gated_delta_rule_tree,
    gated_delta_rule_varlen,
    gdn_gates,
    read_states,
    sequence_bounds,
    write_states,
)

GATING_TARGET = "sglang.kernels.ops.attention.linear.fused_gdn_gating.fused_gdn_gating"
CHUNK_TARGET = "sglang.kernels.ops.attention.fla.chunk.chunk_gated_delta_rule"
PACKED_DECODE_TARGET = (
    "sglang.kernels.ops.attention.fla.fused_recurrent.fused_recurrent_gated_delta_rule_packed_decode"
)
RECURRENT_TARGET = (
    "sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent"
    ".fused_sigmoid_gating_delta_rule_update"
)


def _slots(indices, count: int) -> torch.Tensor:
    return torch.arange(count) if indices is None else indices.to(torch.int64)


def fused_gdn_gating_on_cpu(original, A_log, a, b, dt_bias, beta=1.0, threshold=20.0):
    """AROUND fused_gdn_gating: g and beta, [1, tokens, HV] float32 (beta rounded to b's dtype first)."""
    if not a.is_cpu:
        return original(A_log, a, b, dt_bias, beta=beta, threshold=threshold)
    g, write_strength = gdn_gates(A_log, a, b, dt_bias, softplus_beta=beta, threshold=threshold)
    return g[None], write_strength.to(b.dtype).float()[None]


def chunk_gated_delta_rule_on_cpu(
    original,
    q,
    k,
    v,
    g,
    beta,
    scale=None,
    initial_state=None,
    initial_state_indices=None,
    cu_seqlens=None,
    head_first=False,
    use_qk_l2norm_in_kernel=False,
    inplace_update=True,
):
    """AROUND chunk_gated_delta_rule: returns (o, None, h) like the kernel."""
    if not q.is_cpu:
        return original(
            q, k, v, g, beta, scale=scale, initial_state=initial_state,
            initial_state_indices=initial_state_indices, cu_seqlens=cu_seqlens, head_first=head_first,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, inplace_update=inplace_update,
        )  # fmt: skip
    from sglang.kernels.ops.attention.fla.chunk import CHUNK_SIZE

    if head_first:
        raise NotImplementedError("head_first inputs (deprecated in SGLang) are not supported on CPU")
    rows, length, _, key_dim = k.shape
    heads_v, value_dim = v.shape[-2:]
    bounds = sequence_bounds(cu_seqlens, rows, length)
    slots = _slots(initial_state_indices, len(bounds))
    states = read_states(initial_state, slots, (heads_v, value_dim, key_dim))
    out, finals, kept = gated_delta_rule_varlen(
        *(x.flatten(0, 1) for x in (q, k, v, g, beta)), states, bounds,
        key_dim**-0.5 if scale is None else scale, use_qk_l2norm_in_kernel, keep_every=CHUNK_SIZE,
    )  # fmt: skip
    if inplace_update and initial_state is not None:
        write_states(initial_state, slots, finals)
    # h[c] of a sequence: its state before chunk c (the initial state, then after every 64 tokens).
    chunk_starts = [
        torch.cat([states[i : i + 1], kept[i]])[: -(-(end - start) // CHUNK_SIZE)]
        for i, (start, end) in enumerate(bounds)
    ]
    h = torch.cat(chunk_starts).reshape(rows, -1, heads_v, value_dim, key_dim).to(k.dtype)
    return out.reshape(v.shape).to(q.dtype), None, h


def packed_decode_on_cpu(
    original, mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
    use_qk_l2norm_in_kernel=False,
):  # fmt: skip
    """AROUND fused_recurrent_gated_delta_rule_packed_decode: one step per row of mixed_qkv = q|k|v."""
    if not mixed_qkv.is_cpu:
        return original(
            mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        )  # fmt: skip
    heads_v, value_dim, key_dim = initial_state.shape[-3:]
    qk_dim = (mixed_qkv.shape[1] - heads_v * value_dim) // 2
    q, k, v = mixed_qkv.split([qk_dim, qk_dim, heads_v * value_dim], dim=-1)
    rows = mixed_qkv.shape[0]
    g, write_strength = gdn_gates(A_log, a, b, dt_bias)
    write_strength = write_strength.to(b.dtype).float()  # the kernel rounds beta to b's dtype
    slots = ssm_state_indices.to(torch.int64)
    states = read_states(initial_state, slots, (heads_v, value_dim, key_dim))
    o, finals, _ = gated_delta_rule_varlen(
        q.reshape(rows, -1, key_dim), k.reshape(rows, -1, key_dim), v.reshape(rows, heads_v, value_dim),
        g, write_strength, states, sequence_bounds(None, rows, 1), scale, use_qk_l2norm_in_kernel,
    )  # fmt: skip
    o[slots < 0] = 0  # padding rows: zero output, state untouched
    out.copy_(o.reshape(out.shape))
    write_states(initial_state, slots, finals)
    return out, initial_state


def sigmoid_gating_delta_rule_update_on_cpu(
    original,
    A_log,
    a,
    dt_bias,
    softplus_beta,
    softplus_threshold,
    q,
    k,
    v,
    b,
    initial_state_source,
    initial_state_indices,
    scale=None,
    use_qk_l2norm_in_kernel=False,
    cu_seqlens=None,
    is_kda=False,
    lower_bound=None,
    disable_state_update=False,
    intermediate_states_buffer=None,
    intermediate_state_indices=None,
    cache_steps=None,
    retrieve_parent_token=None,
    **rest,
):
    """AROUND fused_sigmoid_gating_delta_rule_update: GDN decode, chain verify and tree verify (no
    KDA, no ReplaySSM ring) on CPU."""
    given = dict(
        A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=softplus_beta, softplus_threshold=softplus_threshold,
        q=q, k=k, v=v, b=b, initial_state_source=initial_state_source,
        initial_state_indices=initial_state_indices, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, is_kda=is_kda,
        lower_bound=lower_bound, disable_state_update=disable_state_update,
        intermediate_states_buffer=intermediate_states_buffer,
        intermediate_state_indices=intermediate_state_indices, cache_steps=cache_steps,
        retrieve_parent_token=retrieve_parent_token, **rest,
    )  # fmt: skip
    if not q.is_cpu:
        return original(**given)
    if is_kda or lower_bound is not None or any(rest.values()):
        raise NotImplementedError("CPU recurrent GDN covers GDN decode, chain and tree verify only")
    rows, length, _, key_dim = k.shape
    heads_v, value_dim = v.shape[-2:]
    bounds = sequence_bounds(cu_seqlens, rows, length)
    slots = _slots(initial_state_indices, len(bounds))
    states = read_states(initial_state_source, slots, (heads_v, value_dim, key_dim))
    g, write_strength = gdn_gates(
        A_log, a.reshape(-1, heads_v), b.reshape(-1, heads_v), dt_bias, softplus_beta, softplus_threshold
    )
    keep = intermediate_states_buffer is not None
    if retrieve_parent_token is not None:  # a tree: each node starts from its parent's state
        return _tree_verify(
            q, k, v, g, write_strength, states, bounds, key_dim**-0.5 if scale is None else scale,
            use_qk_l2norm_in_kernel, retrieve_parent_token, intermediate_states_buffer,
            intermediate_state_indices,
        )  # fmt: skip
    out, finals, kept = gated_delta_rule_varlen(
        *(x.flatten(0, 1) for x in (q, k, v)), g, write_strength, states, bounds,
        key_dim**-0.5 if scale is None else scale, use_qk_l2norm_in_kernel, keep_every=int(keep),
    )  # fmt: skip
    if keep:
        for row, steps in zip(intermediate_state_indices.tolist(), kept, strict=False):
            if row >= 0:
                intermediate_states_buffer[row, : len(steps)] = steps.to(intermediate_states_buffer.dtype)
    if not disable_state_update and initial_state_source is not None:
        write_states(initial_state_source, slots, finals)
    return out.reshape(v.shape).to(q.dtype)


def _tree_verify(q, k, v, g, write_strength, states, bounds, scale, qk_l2norm, parents, buffer, buffer_rows):
    """TARGET_VERIFY over draft trees (every row the same node count, the live state left alone):
    node t > 0 starts from the state after node parents[row, t], as the kernel reads it back from
    `intermediate_states_buffer`; a row without a buffer row runs as a chain, as there."""
    rows, nodes = len(bounds), bounds[0][1] - bounds[0][0]
    if buffer is None or any(end - start != nodes for start, end in bounds):
        raise NotImplementedError("CPU tree verify needs the intermediate state buffer and equal trees")
    buffer_rows, states = buffer_rows[:rows].to(torch.int64), states[:rows]  # index lists may be padded
    chain = torch.arange(-1, nodes - 1).expand(rows, nodes)
    parents = torch.where((buffer_rows >= 0).unsqueeze(-1), parents[:rows, :nodes].long(), chain)

    def per_row(x):
        return x.flatten(0, 1)[: rows * nodes].reshape(rows, nodes, *x.shape[2:])

    gates = [x.reshape(rows, nodes, -1) for x in (g, write_strength)]
    out, kept = gated_delta_rule_tree(*map(per_row, (q, k, v)), *gates, states, scale, qk_l2norm, parents)
    for i, row in enumerate(buffer_rows.tolist()):
        if row >= 0:
            buffer[row, :nodes] = kept[i].to(buffer.dtype)
    return out.reshape(v.shape).to(q.dtype)
