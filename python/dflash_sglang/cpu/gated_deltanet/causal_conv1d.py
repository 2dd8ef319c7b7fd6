"""The depthwise causal conv1d of Gated DeltaNet layers on CPU (prefill, decode, verify).

Every channel d convolves its own input with a width-W kernel, over the request's last W-1 inputs
(its conv state) followed by the new ones:

    window = [state_d (W-1 values) | x_d (T values)]
    out_d[t] = act(bias_d + sum_j weight_d[j] * window[t + j]),   act: silu or none
    new state_d = window[-(W-1):]

SGLang keeps the state as conv_states[slot, dim, :W-1] and calls two Triton kernels
(`kernels/ops/mamba/causal_conv1d_triton.py`):
- causal_conv1d_fn: packed prefill sequences (x is [dim, tokens]); the state is read only where
  `has_initial_state` (a cached prefix), zeros otherwise, and overwritten with the new window;
- causal_conv1d_update: T tokens per request (decode, or a TARGET_VERIFY block). In verify mode it
  also saves the window after every step, intermediate_conv_window[row, t] = window[t+1 : t+W], so
  the commit can restore the accepted step's window (the live state ends after the whole block).
Rows whose slot is `pad_slot_id` are skipped. For a draft tree (EAGLE's links `retrieve_next_token`
/ `retrieve_next_sibling`) node t convolves over its root path instead of the block order: itself,
its parent, its grandparent, ..., then the conv state; its saved window is that path's, and the
parents derived from the links are written to `retrieve_parent_token` for the GDN kernel, as the
Triton kernel does. `num_accept_tokens` is not covered.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FN_TARGET = "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_fn"
UPDATE_TARGET = "sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update"
PAD_SLOT_ID = -1  # SGLang's PAD_SLOT_ID (causal_conv1d_triton)


def uses_silu(activation) -> bool:
    return activation is True or activation in ("silu", "swish")


def causal_conv(window: torch.Tensor, weight: torch.Tensor, bias, activation) -> torch.Tensor:
    """The outputs for the last T inputs of `window` [dim, W-1+T] (or [n, dim, W-1+T]), in float32."""
    rows = window.float() if window.dim() == 3 else window.float()[None]
    out = F.conv1d(
        rows, weight.float()[:, None, :], None if bias is None else bias.float(), groups=len(weight)
    )
    out = out if window.dim() == 3 else out[0]
    return F.silu(out) if uses_silu(activation) else out


def causal_conv1d_fn_on_cpu(
    original,
    x,
    weight,
    bias,
    conv_states,
    query_start_loc,
    seq_lens_cpu,
    cache_indices=None,
    has_initial_state=None,
    activation="silu",
    pad_slot_id=PAD_SLOT_ID,
    validate_data=False,
    block_table=None,
    **kwargs,
):
    """AROUND causal_conv1d_fn: x [dim, tokens] of packed sequences -> out [dim, tokens]."""
    if not x.is_cpu:
        return original(
            x, weight, bias, conv_states, query_start_loc, seq_lens_cpu, cache_indices=cache_indices,
            has_initial_state=has_initial_state, activation=activation, pad_slot_id=pad_slot_id,
            validate_data=validate_data, block_table=block_table, **kwargs,
        )  # fmt: skip
    state_len = weight.shape[1] - 1
    starts = query_start_loc.tolist()
    slots = list(range(len(starts) - 1)) if cache_indices is None else cache_indices.tolist()
    seeded = [False] * len(slots) if has_initial_state is None else has_initial_state.tolist()
    out = torch.zeros_like(x)
    for i, slot in enumerate(slots):
        start, end = starts[i], starts[i + 1]
        if slot == pad_slot_id or end == start:
            continue
        prior = conv_states[slot, :, :state_len].to(x.dtype) if seeded[i] else x.new_zeros(len(x), state_len)
        window = torch.cat([prior, x[:, start:end]], dim=1)
        out[:, start:end] = causal_conv(window, weight, bias, activation).to(x.dtype)
        conv_states[slot, :, :state_len] = window[:, -state_len:].to(conv_states.dtype)
    return out


def causal_conv1d_update_on_cpu(
    original,
    x,
    conv_state,
    weight,
    bias=None,
    activation=None,
    cache_seqlens=None,
    conv_state_indices=None,
    num_accept_tokens=None,
    intermediate_conv_window=None,
    intermediate_state_indices=None,
    retrieve_next_token=None,
    retrieve_next_sibling=None,
    retrieve_parent_token=None,
    pad_slot_id=PAD_SLOT_ID,
    metadata=None,
    validate_data=False,
):
    """AROUND causal_conv1d_update: x [batch, dim] or [batch, dim, T] -> out of the same shape."""
    if not x.is_cpu:
        return original(
            x, conv_state, weight, bias=bias, activation=activation, cache_seqlens=cache_seqlens,
            conv_state_indices=conv_state_indices, num_accept_tokens=num_accept_tokens,
            intermediate_conv_window=intermediate_conv_window,
            intermediate_state_indices=intermediate_state_indices, retrieve_next_token=retrieve_next_token,
            retrieve_next_sibling=retrieve_next_sibling, retrieve_parent_token=retrieve_parent_token,
            pad_slot_id=pad_slot_id, metadata=metadata, validate_data=validate_data,
        )  # fmt: skip
    if num_accept_tokens is not None:
        raise NotImplementedError("num_accept_tokens is not covered on CPU")
    single_step = x.dim() == 2
    x3 = x[..., None] if single_step else x
    state_len = weight.shape[1] - 1
    slots = list(range(len(x3))) if conv_state_indices is None else conv_state_indices.tolist()
    rows = intermediate_state_indices.tolist() if intermediate_conv_window is not None else None
    columns = None
    if retrieve_next_token is not None:
        parents = parents_from_links(retrieve_next_token, retrieve_next_sibling, x3.shape[2])
        if retrieve_parent_token is not None:
            retrieve_parent_token[:, : x3.shape[2]] = parents.to(retrieve_parent_token.dtype)
        columns = root_path_columns(parents, state_len)
    out = torch.zeros_like(x3)
    if columns is None and len(slots) > 1:  # one row: indexing by ints costs fewer calls
        _chain_update(
            x3, out, conv_state, weight, bias, activation, slots, rows, intermediate_conv_window, pad_slot_id
        )
        return out[..., 0] if single_step else out
    for i, slot in enumerate(slots):
        if slot == pad_slot_id:
            continue
        window = torch.cat([conv_state[slot, :, :state_len].float(), x3[i].float()], dim=1)
        # The live state ends after the whole block in block order (the commit restores a step's).
        conv_state[slot, :, :state_len] = window[:, -state_len:].to(conv_state.dtype)
        if columns is None:
            out[i] = causal_conv(window, weight, bias, activation).to(x3.dtype)
            saved = [window[:, t + 1 : t + 1 + state_len] for t in range(x3.shape[2])]
        else:  # node t's window: its root path's last W inputs, oldest first
            paths = window[:, columns[i]]  # [dim, T, W]
            out[i] = tree_conv(paths, weight, bias, activation).to(x3.dtype)
            saved = [paths[:, t, 1:] for t in range(x3.shape[2])]
        for t in range(len(saved) if rows is not None else 0):
            # One step at a time: the pool may expose the windows as an overlapping view.
            intermediate_conv_window[rows[i], t].copy_(saved[t])
    return out[..., 0] if single_step else out


def _chain_update(x3, out, conv_state, weight, bias, activation, slots, rows, saved_windows, pad_slot_id):
    """Every live row of a decode or chain verify at once: [n, dim, W-1+T] windows, one conv.
    On a small model the cost is the count of torch calls, and a row at a time made it grow with
    the batch (about 15 calls a request a layer)."""
    live = [i for i, slot in enumerate(slots) if slot != pad_slot_id]
    if not live:
        return
    state_len, steps = weight.shape[1] - 1, x3.shape[2]
    picked, live_slots = torch.tensor(live), torch.tensor([slots[i] for i in live])
    window = torch.cat([conv_state[live_slots, :, :state_len].float(), x3[picked].float()], dim=2)
    # The live state ends after the whole block in block order (the commit restores a step's).
    conv_state[live_slots, :, :state_len] = window[:, :, -state_len:].to(conv_state.dtype)
    out[picked] = causal_conv(window, weight, bias, activation).to(x3.dtype)
    if rows is None:
        return
    # Window after step t: inputs t+1 .. t+W-1, [n, T, dim, W-1].
    after = window.unfold(2, state_len, 1)[:, :, 1:].permute(0, 2, 1, 3)
    live_rows = torch.tensor([rows[i] for i in live])
    if saved_windows.is_contiguous():
        saved_windows[live_rows, :steps] = after.to(saved_windows.dtype)
        return
    for n, row in enumerate(live_rows.tolist()):  # an overlapping view: one step at a time
        for t in range(steps):
            saved_windows[row, t].copy_(after[n, t])


def parents_from_links(next_token: torch.Tensor, next_sibling: torch.Tensor, nodes: int) -> torch.Tensor:
    """[rows, T] parent of every node from first-child / next-sibling links, derived in node order
    as SGLang's conv kernel does (a node no link reaches, padding, keeps parent 0)."""
    parents = torch.zeros(next_token.shape[0], nodes, dtype=torch.int64)
    for row, (children, siblings) in enumerate(zip(next_token.tolist(), next_sibling.tolist(), strict=True)):
        for t in range(nodes):
            if children[t] != -1:
                parents[row, children[t]] = t
            if siblings[t] != -1:
                parents[row, siblings[t]] = parents[row, t]
    return parents


def root_path_columns(parents: torch.Tensor, state_len: int) -> torch.Tensor:
    """[rows, T, W] columns of [conv state | block] that node t convolves, oldest first: up its
    root path (node 0 has no parent in the block), then back through the conv state."""
    rows, nodes = parents.shape
    current = torch.arange(nodes).expand(rows, nodes)
    steps = [current]
    for _ in range(state_len):
        up = parents.gather(1, current.clamp_min(0))
        current = torch.where(current > 0, up, current - 1)  # node 0, then state columns -1, -2, ..
        steps.append(current)
    return torch.stack(steps[::-1], dim=-1) + state_len


def tree_conv(paths: torch.Tensor, weight: torch.Tensor, bias, activation) -> torch.Tensor:
    """paths [dim, T, W] (each node's window) -> [dim, T] in float32."""
    out = (paths.float() * weight.float()[:, None, :]).sum(-1)
    if bias is not None:
        out = out + bias.float()[:, None]
    return F.silu(out) if uses_silu(activation) else out
