"""The req_to_token writes and reads (cpu/kernels/req_to_token.py) against an element-by-element loop
with the Triton kernels' semantics: request i owns req_to_token[row_i, start_i:end_i] and the
packed vector holds the requests' runs back to back."""

import torch

from dflash_sglang.cpu.kernels.req_to_token import (
    assign_extend_cache_locs_on_cpu,
    assign_req_to_token_pool_on_cpu,
)

ROWS = torch.tensor([3, 0, 2])
STARTS = torch.tensor([5, 0, 9])
ENDS = torch.tensor([8, 4, 9])  # the last request extends by nothing


def fail(*args, **kwargs):
    raise AssertionError("CPU tensors must not reach SGLang's Triton kernel")


def test_assign_writes_each_run_into_its_row():
    table = torch.full((4, 16), -1, dtype=torch.int32)
    packed = torch.arange(100, 107, dtype=torch.int64)
    assign_req_to_token_pool_on_cpu(fail, ROWS, table, STARTS, ENDS, packed, 3)

    want = torch.full((4, 16), -1, dtype=torch.int32)
    k = 0
    for row, start, end in zip(ROWS.tolist(), STARTS.tolist(), ENDS.tolist(), strict=True):
        for col in range(start, end):
            want[row, col] = int(packed[k])
            k += 1
    assert k == packed.numel()
    assert torch.equal(table, want)


def test_gather_packs_each_row_run_in_batch_order():
    table = torch.arange(64, dtype=torch.int32).view(4, 16) * 10
    draft_token_num = 4
    out = assign_extend_cache_locs_on_cpu(fail, ROWS, table, STARTS, ENDS, 3, draft_token_num, "cpu")

    want = [
        int(table[r, c])
        for r, s, e in zip(ROWS.tolist(), STARTS.tolist(), ENDS.tolist(), strict=True)
        for c in range(s, e)
    ]
    assert out.dtype == torch.int64 and out.shape == (3 * draft_token_num,)
    assert out[: len(want)].tolist() == want
    assert not out[len(want) :].any()


def test_gather_inverts_assign():
    table = torch.zeros(4, 16, dtype=torch.int32)
    packed = torch.randperm(50)[:7].long()
    assign_req_to_token_pool_on_cpu(fail, ROWS, table, STARTS, ENDS, packed, 3)
    out = assign_extend_cache_locs_on_cpu(fail, ROWS, table, STARTS, ENDS, 3, 4, "cpu")
    assert torch.equal(out[:7], packed)


def test_other_devices_go_to_sglang():
    calls = []

    def original(*args):
        calls.append(len(args))
        return "sglang"

    meta_table = torch.empty(4, 16, dtype=torch.int32, device="meta")
    assert assign_req_to_token_pool_on_cpu(original, ROWS, meta_table, STARTS, ENDS, None, 3) == "sglang"
    assert assign_extend_cache_locs_on_cpu(original, ROWS, meta_table, STARTS, ENDS, 3, 4, "meta") == "sglang"
    assert calls == [6, 7]
