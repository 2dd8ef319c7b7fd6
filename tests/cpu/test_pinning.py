"""cpu/pinning.py: `pin_memory=True` in a torch factory is dropped only when there is no accelerator."""

import torch

from dflash_sglang.cpu.pinning import factory_without_pinning


def test_pinning_is_dropped_without_an_accelerator(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.pinning.has_accelerator", lambda: False)
    seen = []

    def factory(*args, **kwargs):
        seen.append(kwargs)
        return torch.tensor(*args, **kwargs)

    tensor = factory_without_pinning(factory, [1, 2], pin_memory=True)
    assert seen == [{"pin_memory": False}] and tensor.tolist() == [1, 2]


def test_pinning_is_kept_with_an_accelerator(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.pinning.has_accelerator", lambda: True)
    seen = []
    factory_without_pinning(lambda *a, **k: seen.append(k), (3,), dtype=torch.int32, pin_memory=True)
    assert seen == [{"dtype": torch.int32, "pin_memory": True}]
