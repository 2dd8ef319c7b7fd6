"""The extra_buffer platform policy and Tensor.pin_memory without an accelerator (cpu/mamba_policy.py).
The resolution itself, through SGLang's argument pipeline, is checked in test_installed.py."""

from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.cpu.mamba_policy import (
    has_accelerator,
    pin_memory_without_accelerator,
    platform_supports_extra_buffer_on_cpu,
    validate_extra_buffer_on_cpu,
)


def platform_whitelist():
    return False  # SGLang's answer on a host that is none of CUDA, MUSA, NPU, HIP, XPU


def validator(seen):
    """Stands in for validate_mamba_extra_buffer: asks the (hooked) platform question."""

    def original(view, hf_config, *, mamba_cache_chunk_size_of):
        seen.append(platform_supports_extra_buffer_on_cpu(platform_whitelist))

    return original


@pytest.mark.parametrize("device,answer", [("cpu", True), ("cuda", False)])
def test_only_a_cpu_servers_validation_passes_the_platform_check(device, answer):
    seen = []
    validate_extra_buffer_on_cpu(
        validator(seen), SimpleNamespace(device=device), None, mamba_cache_chunk_size_of=None
    )
    assert seen == [answer]
    assert platform_supports_extra_buffer_on_cpu(platform_whitelist) is False  # outside validation


def original_pin_memory():
    method = torch.Tensor.pin_memory
    return getattr(method, "__wrapped__", method)  # hooks may already be applied in this process


@pytest.mark.skipif(has_accelerator(), reason="pinning works with an accelerator")
def test_torch_cannot_pin_without_an_accelerator_so_the_stand_in_is_needed():
    with pytest.raises(RuntimeError):
        original_pin_memory()(torch.zeros(2))


def test_without_an_accelerator_the_tensor_is_returned_as_it_is(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.mamba_policy.has_accelerator", lambda: False)
    mask = torch.tensor([True, False])
    assert pin_memory_without_accelerator(original_pin_memory(), mask) is mask


def test_with_an_accelerator_torch_pins(monkeypatch):
    monkeypatch.setattr("dflash_sglang.cpu.mamba_policy.has_accelerator", lambda: True)
    assert pin_memory_without_accelerator(lambda tensor: "pinned", torch.zeros(1)) == "pinned"
