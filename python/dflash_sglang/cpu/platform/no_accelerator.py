"""Calls SGLang makes as if an accelerator were always there, answered faithfully when none is.

- `Tensor.pin_memory()`: `ScheduleBatch.prepare_for_decode` pins the extra_buffer track mask
  unconditionally; the torch_native LoRA backend pins its batch info;
- `torch.tensor(..., pin_memory=True)`, `torch.zeros(..., pin_memory=True)`: SGLang's LoRA layers
  and backend stage batch info in pinned buffers;
- `torch.cuda.synchronize()`: `/release_memory_occupation` waits for the device after pausing the
  memory saver (through `torch.get_device_module()`, which is torch.cuda on a cpu server);
- `cudaHostRegister` / `cudaHostUnregister` of host buffers (`pool_host.common`): the routed-experts
  capturer (`--enable-return-routed-experts`) and the hierarchical cache's host pool register
  their buffers for fast copies to the device;
- `is_triton_kernels_available()`: true wherever the `triton_kernels` package imports, and the
  gpt-oss model override then picks its MoE runner (`--moe-runner-backend triton_kernel`), whose
  kernels run on a GPU only. With no accelerator it is not available.
Torch raises on each without an accelerator. Pinning and registering only speed up copies to an
accelerator and synchronizing waits for one, so with none the unpinned tensor, and returning at
once, are what these calls mean. With an accelerator every call is left as it is.
"""

from __future__ import annotations

import torch

PIN_MEMORY_TARGET = "torch.Tensor.pin_memory"
FACTORY_TARGETS = ("torch.tensor", "torch.zeros")
SYNCHRONIZE_TARGET = "torch.cuda.synchronize"
# Hooks on torch itself, which every torch call in the process goes through.
TORCH_WIDE_TARGETS = (PIN_MEMORY_TARGET, *FACTORY_TARGETS, SYNCHRONIZE_TARGET)
TRITON_KERNELS_TARGET = "sglang.srt.utils.common.is_triton_kernels_available"
HOST_REGISTER_TARGETS = (
    "sglang.srt.mem_cache.pool_host.common._cuda_host_register",
    "sglang.srt.mem_cache.pool_host.common._cuda_host_unregister",
)


def has_accelerator() -> bool:
    return torch.accelerator.is_available()


def pin_memory_without_accelerator(original, tensor, *args, **kwargs):
    """AROUND Tensor.pin_memory: with no accelerator to copy to, the tensor as it is."""
    if has_accelerator():
        return original(tensor, *args, **kwargs)
    return tensor


def factory_without_pinning(original, *args, **kwargs):
    """AROUND a torch factory: `pin_memory=True` is dropped when there is no accelerator to pin for."""
    if kwargs.get("pin_memory") and not has_accelerator():
        kwargs["pin_memory"] = False
    return original(*args, **kwargs)


def synchronize_without_accelerator(original, *args, **kwargs):
    """AROUND torch.cuda.synchronize, and cudaHostRegister/Unregister of a host buffer: with no
    device there is nothing to wait for and nothing to register with."""
    if has_accelerator():
        return original(*args, **kwargs)
    return None


def triton_kernels_need_an_accelerator(original):
    """AROUND is_triton_kernels_available: False with no accelerator to run the kernels on."""
    return has_accelerator() and original()
