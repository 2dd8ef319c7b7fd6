"""Draft trees on a Gated DeltaNet target through SGLang's ReplaySSM ring: records per node, no
state per node (docs/hybrid.md, "Trees through a replay ring").

The verify: SGLang's GDN backend sends a ring verify to `_replayssm_target_verify`, whose kernel
replays a chain. When the batch is a tree (the conv kernel has filled the backend's
`retrieve_parent_token`), this hook runs our tree replay instead, with the same ring, cursors and
arguments: each node's output from the request's checkpoint and its ancestors' records, node t's
record written to ring lane base + wp + t. On CUDA the Triton kernel, elsewhere the torch twin.

The commit: the accepted path's records are moved to consecutive lanes (`compact_accepted_path`),
after which SGLang's chain commit applies: the cursor advance and the fold into the checkpoint
(the track slot at the tracked depth), and the conv window rolled back to the accepted node. The
conv windows are kept per node, so the roll-back (and the track slot's window) takes node indices
while the ring's fold takes depths: the two parts of SGLang's `commit_mamba_states_after_verify`
are called here with each its own index.
"""

from __future__ import annotations

import torch

from ..cpu.gated_deltanet.tree_replay import compact_accepted_path, gdn_tree_replay_verify

VERIFY_TARGET = "sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend._replayssm_target_verify"
NULL_SLOT = -1  # SGLang marks padding rows with a negative mamba slot


def tree_verify_kernel(device: torch.device):
    """Our Triton kernel where Triton runs (CUDA), the torch twin elsewhere."""
    if device.type == "cuda":
        from ..cpu.gated_deltanet.tree_replay_triton import gdn_tree_replay_verify_triton

        return gdn_tree_replay_verify_triton
    return gdn_tree_replay_verify


def node_parents(retrieve_parent_token: torch.Tensor, requests: int, nodes: int) -> torch.Tensor:
    """[requests * nodes] each token's parent node within its request, -1 for the root (the
    conv kernel's parents hang padding nodes off node 0 and leave the root's entry unset)."""
    parents = retrieve_parent_token[:requests, :nodes].to(torch.int32).clone()
    parents[:, 0] = -1
    return parents.flatten().contiguous()


def verify_trees_through_the_ring(original, backend, **kw):
    """AROUND GDNAttnBackend._replayssm_target_verify: a chain goes to SGLang's kernel, a tree to
    ours (same arguments, plus the parents)."""
    parents = getattr(backend.forward_metadata, "retrieve_parent_token", None)
    if parents is None:
        return original(backend, **kw)
    layer, query, key, value = kw["layer"], kw["query"], kw["key"], kw["value"]
    heads, dim_k, heads_v, dim_v = layer.num_k_heads, layer.head_k_dim, layer.num_v_heads, layer.head_v_dim
    tokens = query.numel() // (heads * dim_k)
    requests = kw["query_start_loc"].shape[0] - 1
    cache, pool = kw["layer_cache"], kw["mamba_pool"]
    out = query.new_empty(tokens, heads_v, dim_v)
    tree_verify_kernel(query.device)(
        query.reshape(tokens, heads, dim_k).contiguous(), key.reshape(tokens, heads, dim_k).contiguous(),
        value.reshape(tokens, heads_v, dim_v).contiguous(), kw["a"].reshape(tokens, heads_v).contiguous(),
        kw["b"].reshape(tokens, heads_v).contiguous(), layer.A_log, layer.dt_bias, cache.temporal,
        cache.replayssm_d, cache.replayssm_k, cache.replayssm_g, cache.replayssm_rawv, cache.replayssm_rawk,
        out, kw["query_start_loc"], kw["cache_indices"], kw["replay_indices"], pool.replayssm_spec_write_pos,
        pool.replayssm_cache_base, node_parents(parents, requests, tokens // max(requests, 1)),
        scale=dim_k**-0.5, use_qk_l2norm_in_kernel=True, null_block_id=NULL_SLOT,
    )  # fmt: skip
    return out.reshape(value.shape)


def commit_tree_through_the_ring(target_worker, batch, accepted, path_rows, last_node, track):
    """The ring commit of a tree verify. `accepted` [bs] tokens committed (bonus included),
    `path_rows` [bs, depth] the accepted path's nodes, `last_node` [bs] the node whose conv window
    becomes live, `track` None or (depth step, node) [bs] each of the tracked step (-1: none)."""
    from sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode import (
        commit_gdn_replayssm_circular,
        commit_gdn_replayssm_spec,
    )
    from sglang.kernels.ops.mamba.mamba_state_scatter_triton import fused_conv_window_scatter_with_mask
    from sglang.srt.layers.attention.linear.utils import pp_spec_stable_rows_enabled

    pool = target_worker.model_runner.req_to_token_pool
    mamba, state = pool.mamba_pool, pool.get_speculative_mamba2_params_all_layers()
    rows, slots = batch.req_pool_indices[: accepted.shape[0]], pool.get_mamba_indices(batch.req_pool_indices)
    lengths = accepted.to(torch.int32)
    depth = torch.arange(path_rows.shape[1], device=path_rows.device)
    on_path = torch.where(depth < lengths[:, None], path_rows.long(), -1)
    rings = (state.replayssm_d, state.replayssm_k, state.replayssm_rawv, state.replayssm_rawk)
    rings = [*(r for r in rings if r is not None), state.replayssm_g]
    write_pos, base = mamba.replayssm_spec_write_pos, mamba.replayssm_cache_base
    flush = mamba.replayssm_is_flush
    compact_accepted_path(rings, rows, write_pos, base, on_path, NULL_SLOT)
    ring_length = state.replayssm_d.shape[-2]
    commit_gdn_replayssm_spec(
        write_pos=write_pos, cache_base=base, is_flush=flush, num_accepted=lengths, replay_indices=rows,
        max_cache_len=ring_length, max_spec_len=ring_length,  # so every commit folds
        fold_every_commit=state.temporal.dtype != torch.float32, null_block_id=NULL_SLOT,
    )  # fmt: skip
    track_depth, track_node = track if track is not None else (None, None)
    commit_gdn_replayssm_circular(
        checkpoint_state=state.temporal, d_cache=state.replayssm_d, k_cache=state.replayssm_k,
        g_cache=state.replayssm_g, d_residual_cache=state.replayssm_rawv,
        k_residual_cache=state.replayssm_rawk, state_batch_indices=slots, replay_indices=rows,
        write_pos=write_pos, cache_base=base, is_flush=flush, accept_lens=lengths,
        mamba_track_indices=batch.mamba_track_indices, mamba_steps_to_track=track_depth,
        null_block_id=NULL_SLOT,
    )  # fmt: skip
    windows, stable_rows = state.intermediate_conv_window[0], rows if pp_spec_stable_rows_enabled() else None
    fused_conv_window_scatter_with_mask(state.conv[0], windows, slots, last_node, stable_rows)
    if batch.mamba_track_indices is not None and track_node is not None:
        fused_conv_window_scatter_with_mask(
            state.conv[0], windows, batch.mamba_track_indices, track_node, stable_rows
        )
