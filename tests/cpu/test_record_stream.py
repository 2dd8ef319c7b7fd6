"""Tensor.record_stream on CPU tensors (cpu/platform/record_stream.py)."""

import pytest
import torch

from dflash_sglang.cpu.platform.record_stream import record_stream_on_cpu


def original_record_stream():
    # Hooks may already be applied in this process; the original is what they wrap.
    method = torch.Tensor.record_stream
    return getattr(method, "__wrapped__", method)


def test_torch_refuses_cpu_tensors_so_the_stand_in_is_needed():
    with pytest.raises(RuntimeError):
        original_record_stream()(torch.zeros(2), torch.cpu.current_stream())


def test_cpu_tensors_are_a_no_op():
    seq_lens = torch.tensor([3, 5])
    assert record_stream_on_cpu(original_record_stream(), seq_lens, torch.cpu.current_stream()) is None
    assert seq_lens.tolist() == [3, 5]


def test_other_devices_go_to_torch():
    calls = []
    tensor = torch.empty(2, device="meta")
    record_stream_on_cpu(lambda t, s: calls.append((t, s)), tensor, "stream")
    assert calls == [(tensor, "stream")]
