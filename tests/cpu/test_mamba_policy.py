"""The extra_buffer platform policy (cpu/platform/mamba_policy.py).
The resolution itself, through SGLang's argument pipeline, is checked in test_installed.py."""

from types import SimpleNamespace

import pytest

from dflash_sglang.cpu.platform.mamba_policy import (
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
