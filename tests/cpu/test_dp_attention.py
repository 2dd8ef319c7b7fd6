"""cpu/dp_attention.py: the padded-request fill value for torch_native, and the DP gather's copy
on CPU tensors (against plain slicing); other backends and devices go to SGLang's originals."""

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

from dflash_sglang.cpu.dp_attention import memcpy_on_cpu, padded_seq_len_one_for_torch_native


def test_torch_native_pads_with_one_and_others_keep_their_answer():
    native = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)
    assert padded_seq_len_one_for_torch_native(lambda backend: pytest.fail("not torch_native"), native) == 1
    assert padded_seq_len_one_for_torch_native(lambda backend: 0, object()) == 0


@pytest.mark.parametrize("offset_src", [False, True])
def test_the_dp_copy_on_cpu_moves_the_rank_rows(offset_src):
    src, dst = torch.arange(24.0).view(6, 4), torch.zeros(8, 4)
    offset, size = torch.tensor(2), torch.tensor(3)
    memcpy_on_cpu(lambda *a: pytest.fail("the Triton kernel on CPU"), dst, src, 0, offset, size, offset_src)
    want = torch.zeros(8, 4)
    if offset_src:  # src[offset : offset + size] -> dst[0 : size]
        want[0:3] = src[2:5]
    else:  # src[0 : size] -> dst[offset : offset + size]
        want[2:5] = src[0:3]
    assert torch.equal(dst, want)
