"""KV-pool row moves on CPU (cpu/kernels/kv_pool.py): a real MHATokenToKVPool skips the Triton warm-up
and moves rows with SGLang's torch path; checked against a per-row copy of every layer."""

import pytest
import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

from dflash_sglang.cpu.kernels.kv_pool import native_kv_move_on_cpu

LAYERS, SLOTS = 3, 32


def pool():
    return MHATokenToKVPool(
        size=SLOTS, page_size=1, dtype=torch.float32, head_num=2, head_dim=4,
        layer_num=LAYERS, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def original_warmup():
    method = MHATokenToKVPool._init_kv_copy_and_warmup
    return getattr(method, "__wrapped__", method)


def test_sglang_warmup_needs_triton_on_cpu():
    with pytest.raises(RuntimeError):
        original_warmup()(pool())


def test_cpu_pool_moves_rows_in_every_layer():
    kv = pool()
    native_kv_move_on_cpu(original_warmup(), kv)
    for buffers in (kv.k_buffer, kv.v_buffer):
        for buf in buffers:
            buf.copy_(torch.randn(buf.shape))
    before = [(k.clone(), v.clone()) for k, v in zip(kv.k_buffer, kv.v_buffer, strict=True)]
    src, tgt = torch.tensor([3, 7, 8, 20]), torch.tensor([11, 1, 30, 2])

    kv.move_kv_cache(tgt, src)

    for layer, (k_before, v_before) in enumerate(before):
        k_want, v_want = k_before.clone(), v_before.clone()
        for s, t in zip(src.tolist(), tgt.tolist(), strict=True):
            k_want[t], v_want[t] = k_before[s], v_before[s]
        assert torch.equal(kv.k_buffer[layer], k_want)
        assert torch.equal(kv.v_buffer[layer], v_want)


def test_other_devices_keep_sglang_warmup():
    calls = []
    gpu_like = type("Pool", (), {"device": "meta"})()
    native_kv_move_on_cpu(lambda p: calls.append(p), gpu_like)
    assert calls == [gpu_like]
    assert not hasattr(gpu_like, "use_native_move_kv_cache")
