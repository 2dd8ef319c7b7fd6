"""Catch host syncs in a decode step: device data read on the host.

On a GPU, `item()`, `tolist()`, `cpu()`, `numpy()`, `bool(t)`, `int(t)`, ... on a device tensor
block the host until the GPU has caught up, which stalls SGLang's overlap scheduler: it can no
longer plan step t+1 while step t runs. On CPU nothing blocks, so such a sync is invisible.
`DeviceDataGuard` makes it visible on any device: it tracks which tensors hold device data (the
step's inputs and everything computed from them) and raises `HostSyncError` when one is read on
the host. SGLang's host mirrors (`seq_lens_cpu`, ...) never hold device data, so reading them is
fine; so are CPU-only stand-ins (SGLang's torch_native attention, this package's `cpu/`), which
a GPU replaces with kernels.

Enabled in a server with DFLASH_SGLANG_CHECK_HOST_SYNC=1 (a debugging switch; it slows steps).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from contextvars import ContextVar

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ..environment import CHECK_HOST_SYNC

_MARK = "_dflash_device_data"

HOST_READS = {
    torch.Tensor.item: "item()",
    torch.Tensor.tolist: "tolist()",
    torch.Tensor.cpu: "cpu()",
    torch.Tensor.numpy: "numpy()",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__index__: "index(tensor)",
}
# Batch fields SGLang builds on the host although their names lack `_cpu`.
HOST_FIELDS = ("extend_input_logprob_token_ids",)
# Files whose host reads are not on a GPU's path: CPU-only stand-ins for GPU kernels.
CPU_ONLY_FILES = (
    os.path.join("sglang", "srt", "layers", "attention", "torch_native_backend.py"),
    # SGLang's torch MoE for CPU (UnquantizedFusedMoEMethod.forward_cpu); GPUs run fused kernels.
    os.path.join("sglang", "srt", "layers", "moe", "fused_moe_native.py"),
    os.path.join("dflash_sglang", "cpu", ""),
)


class HostSyncError(RuntimeError):
    """A step read device data on the host (a GPU host sync)."""


# Set inside `allowed(reason)`: a host read the step needs by design (grammar masks).
_allowed_reason: ContextVar[str | None] = ContextVar("dflash_host_sync_allowed", default=None)


@contextlib.contextmanager
def allowed(reason: str):
    """Host reads inside are intended: only requests that need them (grammar) take this path, and
    the reason says why. SGLang's own speculative workers share these syncs."""
    token = _allowed_reason.set(reason)
    try:
        yield
    finally:
        _allowed_reason.reset(token)


def enabled() -> bool:
    return CHECK_HOST_SYNC.value()


def mark_device_data(tensors: Iterable) -> None:
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            setattr(tensor, _MARK, True)


def landed_on_host(tensor: torch.Tensor) -> None:
    """A host copy whose copy has finished (runtime/host_copies.py): reading it does not wait."""
    setattr(tensor, _MARK, False)


def holds_device_data(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and getattr(tensor, _MARK, False)


def step_inputs(batch) -> list[torch.Tensor]:
    """The device tensors a step starts from: the batch's, its draft state's and its sampling
    parameters', except the host mirrors SGLang names `*_cpu`.

    On CPU, SGLang's `seq_lens.cpu()` returns `seq_lens` itself; such a mirror gets its own copy
    here, as it has on a GPU, so that reading it is not mistaken for reading device data."""
    owners = [batch, getattr(batch, "spec_info", None), getattr(batch, "sampling_info", None)]
    owners = [owner for owner in owners if owner is not None]
    device = [
        value
        for owner in owners
        for name, value in vars(owner).items()
        if isinstance(value, torch.Tensor) and "_cpu" not in name and name not in HOST_FIELDS
    ]
    device_ids = {id(tensor) for tensor in device}
    for owner in owners:
        for name, value in list(vars(owner).items()):
            if "_cpu" in name and id(value) in device_ids:
                setattr(owner, name, value.clone())
    return device


def _writes_in_place(func, kwargs) -> bool:
    name = getattr(func, "__name__", "")
    return "out" in kwargs or name in ("__setitem__", "copy_", "index_put_") or name.endswith("_")


def _called_from_cpu_only_code() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in CPU_ONLY_FILES):
            return True
        frame = frame.f_back
    return False


class DeviceDataGuard(TorchFunctionMode):
    """Inside `with DeviceDataGuard(inputs):`, reading a tensor derived from `inputs` on the host
    raises HostSyncError."""

    def __init__(self, device_tensors: Iterable[torch.Tensor]):
        super().__init__()
        mark_device_data(device_tensors)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _allowed_reason.get() is not None:
            return func(*args, **kwargs)
        if func in HOST_READS and holds_device_data(args[0]) and not _called_from_cpu_only_code():
            raise HostSyncError(
                f"{HOST_READS[func]} on device data inside a DFlash step: on a GPU this blocks the "
                "host until the device catches up (a host sync)"
            )
        if func is torch.Tensor.to and holds_device_data(args[0]) and _targets_host(args, kwargs):
            if not _called_from_cpu_only_code():
                raise HostSyncError("to('cpu') on device data inside a DFlash step (a host sync)")
        out = func(*args, **kwargs)
        inputs = tree_leaves((args, kwargs))
        if any(holds_device_data(x) for x in inputs):
            mark_device_data(tree_leaves(out))
            if _writes_in_place(func, kwargs):
                mark_device_data([args[0], kwargs.get("out")])
        return out


def _targets_host(args, kwargs) -> bool:
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str | torch.device) and torch.device(target).type == "cpu"
