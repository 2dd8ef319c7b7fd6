"""cpu/platform/no_accelerator.py: pinning and synchronizing are answered without an accelerator, and left to
torch with one."""

import pytest
import torch

from dflash_sglang.cpu.platform.no_accelerator import (
    factory_without_pinning,
    has_accelerator,
    pin_memory_without_accelerator,
    synchronize_without_accelerator,
)


def test_pinning_is_dropped_without_an_accelerator(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: False)
    seen = []

    def factory(*args, **kwargs):
        seen.append(kwargs)
        return torch.tensor(*args, **kwargs)

    tensor = factory_without_pinning(factory, [1, 2], pin_memory=True)
    assert seen == [{"pin_memory": False}] and tensor.tolist() == [1, 2]


def test_pinning_is_kept_with_an_accelerator(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: True)
    seen = []
    factory_without_pinning(lambda *a, **k: seen.append(k), (3,), dtype=torch.int32, pin_memory=True)
    assert seen == [{"dtype": torch.int32, "pin_memory": True}]


def original_pin_memory():
    method = torch.Tensor.pin_memory
    return getattr(method, "__wrapped__", method)  # hooks may already be applied in this process


@pytest.mark.skipif(has_accelerator(), reason="pinning works with an accelerator")
def test_torch_cannot_pin_without_an_accelerator_so_the_stand_in_is_needed():
    with pytest.raises(RuntimeError):
        original_pin_memory()(torch.zeros(2))


def test_without_an_accelerator_the_tensor_is_returned_as_it_is(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: False)
    mask = torch.tensor([True, False])
    assert pin_memory_without_accelerator(original_pin_memory(), mask) is mask


def test_with_an_accelerator_torch_pins(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: True)
    assert pin_memory_without_accelerator(lambda tensor: "pinned", torch.zeros(1)) == "pinned"


def test_synchronize_returns_at_once_without_an_accelerator(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: False)
    assert synchronize_without_accelerator(lambda: pytest.fail("torch.cuda would raise")) is None
    monkeypatch.setattr("dflash_sglang.cpu.platform.no_accelerator.has_accelerator", lambda: True)
    assert synchronize_without_accelerator(lambda: "waited") == "waited"
