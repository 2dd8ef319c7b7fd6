"""The host-sync check: device data, and everything computed from it, cannot be read on the host
inside a guarded step; host mirrors can; a planted read is caught wherever it hides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.runtime.host_sync import DeviceDataGuard, HostSyncError, step_inputs

HOST_READS = [
    lambda t: t.item(),
    lambda t: t.tolist(),
    lambda t: t.cpu(),
    lambda t: t.numpy(),
    lambda t: t.to("cpu"),
    lambda t: bool(t),
    lambda t: int(t),
    lambda t: float(t),
    lambda t: [10, 20, 30][t],
]


@pytest.mark.parametrize(
    "read", HOST_READS, ids=["item", "tolist", "cpu", "numpy", "to", "bool", "int", "float", "index"]
)
def test_every_host_read_of_derived_device_data_is_caught(read):
    seq_lens = torch.tensor([5, 7])
    with DeviceDataGuard([seq_lens]):
        derived = (seq_lens + 4).max() - 10  # a scalar two ops away from the input
        with pytest.raises(HostSyncError):
            read(derived)


def test_data_written_into_a_fresh_buffer_stays_device_data():
    bonus = torch.tensor([3, 4])
    with DeviceDataGuard([bonus]):
        block = torch.full((2, 4), 9)  # created here: no device data yet
        assert block.sum().item() == 72
        block[:, 0] = bonus
        with pytest.raises(HostSyncError):
            block[0, 0].item()
        out = torch.empty(2, dtype=torch.int64)
        torch.add(bonus, 1, out=out)
        with pytest.raises(HostSyncError):
            out.tolist()


def test_host_mirrors_and_results_outside_the_step_can_be_read():
    seq_lens, seq_lens_cpu = torch.tensor([5, 7]), torch.tensor([5, 7])
    with DeviceDataGuard([seq_lens]):
        bound = seq_lens_cpu + 4
        assert int(bound.sum()) == 20
        result = seq_lens * 2
    assert result.tolist() == [10, 14]  # the scheduler reads results after the step


def test_step_inputs_marks_device_tensors_and_unaliases_cpu_mirrors():
    """On CPU, SGLang's `seq_lens.cpu()` is `seq_lens` itself; the mirror gets its own copy."""
    seq_lens = torch.tensor([5, 7])
    batch = SimpleNamespace(
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens,
        req_pool_indices=torch.tensor([1, 2]),
        spec_info=SimpleNamespace(bonus_tokens=torch.tensor([8, 9]), nxt_kv_lens_cpu=torch.tensor([9, 9])),
        sampling_info=None,
    )
    inputs = step_inputs(batch)
    assert batch.seq_lens_cpu is not seq_lens and batch.seq_lens_cpu.tolist() == [5, 7]
    assert {id(t) for t in inputs} == {
        id(seq_lens),
        id(batch.req_pool_indices),
        id(batch.spec_info.bonus_tokens),
    }
    with DeviceDataGuard(inputs):
        assert int(batch.seq_lens_cpu.sum() + batch.spec_info.nxt_kv_lens_cpu.sum()) == 30
        with pytest.raises(HostSyncError):
            (batch.spec_info.bonus_tokens + batch.seq_lens).tolist()
