"""Row copies between slots of SGLang's mamba state pools on CPU (`mamba_state_scatter_triton.py`).

Speculative verify (TARGET_VERIFY) keeps every draft step's linear-attention state in scratch
buffers: `intermediate_ssm` [layers, rows, steps, HV, V, K] and `intermediate_conv_window`
[layers, rows, steps, dim, W-1] (on CUDA hosts an overlapping view: step t's window starts one
column after step t-1's). The commit, `update_mamba_state_after_mtp_verify`, copies the accepted
step of each request into its live slot (and, at a `--mamba-track-interval` boundary, into its
prefix-cache track slot) through three Triton kernels, all the same masked gather-scatter:

    for every i with step[i] >= 0 and dst[i] in range:  pool[:, dst[i]] = scratch[:, src[i], step[i]]

with src[i] = i unless given (SGLang has a torch twin, `HybridLinearAttnBackend.
_scatter_speculative_state_with_mask`, but its module pulls in flashinfer; the copy here is three
lines of indexing).

The extra_buffer strategy also snapshots live states into track slots during prefill and decode
(`track_mamba_states_if_needed` per layer, `track_mamba_states_all_layers` for [layers, slot, ...]
pools): for every batch row i < batch_size with mask[i], pool[track[i]] = pool[cache[i]], skipping
freed (-1) slots when asked.
"""

from __future__ import annotations

import torch

SCATTER_TARGET = "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_mamba_state_scatter_with_mask"
CONV_SCATTER_TARGET = (
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_conv_window_scatter_with_mask"
)
CONV_SCATTER_MULTI_TARGET = (
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton.fused_conv_window_scatter_multi"
)
TRACK_TARGET = "sglang.kernels.ops.mamba.mamba_state_scatter_triton.track_mamba_states_if_needed"
TRACK_ALL_LAYERS_TARGET = "sglang.kernels.ops.mamba.mamba_state_scatter_triton.track_mamba_states_all_layers"


def scatter_steps(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw=None) -> None:
    """dst[:, dst[i]] = src[:, src[i], step[i]] for the rows whose indices are all in range."""
    steps, rows_dst = step_indices_raw.to(torch.int64), dst_indices_raw.to(torch.int64)
    rows_src = torch.arange(len(steps)) if src_indices_raw is None else src_indices_raw.to(torch.int64)
    valid = (steps >= 0) & (steps < src.shape[2]) & (rows_dst >= 0) & (rows_dst < dst.shape[1])
    valid &= (rows_src >= 0) & (rows_src < src.shape[1])
    if not src.is_contiguous():  # an overlapping view of the windows: flattening it would copy it all
        dst[:, rows_dst[valid]] = src[:, rows_src[valid], steps[valid]]
        return
    picked = rows_src[valid] * src.shape[2] + steps[valid]
    # index_select over (row, step) flattened: an advanced index across dims 1 and 2 is ~10x slower
    dst[:, rows_dst[valid]] = src.flatten(1, 2).index_select(1, picked)


def scatter_with_mask_on_cpu(original, dst, src, dst_indices_raw, step_indices_raw, src_indices_raw=None):
    """AROUND fused_mamba_state_scatter_with_mask and fused_conv_window_scatter_with_mask."""
    if not dst.is_cpu:
        return original(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)
    scatter_steps(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)


def conv_scatter_multi_on_cpu(
    original, pairs, dst_indices_raw, step_indices_raw, dst_indices2_raw=None, step_indices2_raw=None
):
    """AROUND fused_conv_window_scatter_multi: every (pool, scratch) pair, for both index sets."""
    if not pairs[0][0].is_cpu:
        return original(pairs, dst_indices_raw, step_indices_raw, dst_indices2_raw, step_indices2_raw)
    for dst, src in pairs:
        scatter_steps(dst, src, dst_indices_raw, step_indices_raw)
        if step_indices2_raw is not None:
            scatter_steps(dst, src, dst_indices2_raw, step_indices2_raw)


def tracked_rows(cache_indices, mamba_track_mask, mamba_track_indices, batch_size, check_freed_slots):
    """(source slots, track slots) of the rows to snapshot."""
    rows = mamba_track_mask[:batch_size].nonzero().flatten()
    src, dst = cache_indices[rows].to(torch.int64), mamba_track_indices[rows].to(torch.int64)
    if check_freed_slots:
        live = (src >= 0) & (dst >= 0)
        src, dst = src[live], dst[live]
    return src, dst


def track_on_cpu(
    original, conv_states, ssm_states, cache_indices, mamba_track_mask, mamba_track_indices, batch_size,
    check_freed_slots=False,
):  # fmt: skip
    """AROUND track_mamba_states_if_needed: one layer's pools, [slot, ...]."""
    if not conv_states.is_cpu:
        return original(
            conv_states, ssm_states, cache_indices, mamba_track_mask, mamba_track_indices, batch_size,
            check_freed_slots,
        )  # fmt: skip
    src, dst = tracked_rows(
        cache_indices, mamba_track_mask, mamba_track_indices, batch_size, check_freed_slots
    )
    conv_states[dst] = conv_states[src]
    ssm_states[dst] = ssm_states[src]


def track_all_layers_on_cpu(
    original, conv_states_pool, ssm_states_pool, cache_indices, mamba_track_mask, mamba_track_indices,
    batch_size, check_freed_slots=False,
):  # fmt: skip
    """AROUND track_mamba_states_all_layers: every layer's pools at once, [layer, slot, ...]."""
    if not conv_states_pool.is_cpu:
        return original(
            conv_states_pool, ssm_states_pool, cache_indices, mamba_track_mask, mamba_track_indices,
            batch_size, check_freed_slots,
        )  # fmt: skip
    src, dst = tracked_rows(
        cache_indices, mamba_track_mask, mamba_track_indices, batch_size, check_freed_slots
    )
    conv_states_pool[:, dst] = conv_states_pool[:, src]
    ssm_states_pool[:, dst] = ssm_states_pool[:, src]
