"""Writes into and reads from the request -> KV-slot table (`req_to_token`) on CPU.

Both SGLang functions launch Triton kernels over `(req_pool_indices, start_offset, end_offset)`:
request i owns `req_to_token[req_pool_indices[i], start_offset[i]:end_offset[i]]`, and the packed
vector holds the requests' runs back to back, in batch order.
"""

from __future__ import annotations

import torch

ASSIGN_TARGET = "sglang.srt.mem_cache.allocation.assign_req_to_token_pool_func"
GATHER_TARGET = "sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func"


def _runs(req_pool_indices, start_offset, end_offset):
    """(row, start, end, packed offset) per request; host loop, fine on CPU."""
    rows = req_pool_indices.tolist()
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    packed = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        yield row, start, end, packed
        packed += end - start


def write_req_to_token(req_to_token, req_pool_indices, start_offset, end_offset, out_cache_loc):
    """req_to_token[row_i, start_i:end_i] = the i-th run of the packed `out_cache_loc`."""
    for row, start, end, packed in _runs(req_pool_indices, start_offset, end_offset):
        req_to_token[row, start:end] = out_cache_loc[packed : packed + end - start]


def gather_req_to_token(req_to_token, req_pool_indices, start_offset, end_offset, out):
    """The inverse: pack each request's req_to_token[row_i, start_i:end_i] into `out`."""
    for row, start, end, packed in _runs(req_pool_indices, start_offset, end_offset):
        out[packed : packed + end - start] = req_to_token[row, start:end]
    return out


def assign_req_to_token_pool_on_cpu(
    original, req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size
):
    """AROUND assign_req_to_token_pool_func (Triton; its CPU branch needs an sgl_kernel op)."""
    if not req_to_token.is_cpu:
        return original(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, batch_size)
    write_req_to_token(req_to_token, req_pool_indices, start_offset, end_offset, out_cache_loc)


def assign_extend_cache_locs_on_cpu(
    original, req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device
):
    """AROUND assign_extend_cache_locs_func (Triton; returns None off the known devices)."""
    if not req_to_token.is_cpu:
        return original(
            req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device
        )
    # Same shape and dtype as SGLang's buffer; zeros instead of garbage past the packed runs.
    out = torch.zeros(batch_size * draft_token_num, dtype=torch.int64, device=req_to_token.device)
    return gather_req_to_token(req_to_token, req_pool_indices, start_offset, end_offset, out)
