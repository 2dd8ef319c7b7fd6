"""Tensor parallelism on CPU over gloo: the two collectives paths that assume a GPU.

- PyNccl on gloo groups. `init_model_parallel_group` turns PyNccl on for every in-tree platform
  but NPU/XPU, and a CUDA build of torch counts as one even without a GPU: each TP group then
  builds a `PyNcclCommunicator` on the CPU device and stops ("Expected a cuda device, but got:
  cpu"). For a gloo group on the CPU device the stand-in passes `use_pynccl=False`, so collectives
  take the group's torch.distributed path (gloo), as they would on a CPU engine build.
- `sglang::reg_all_gather_into_tensor`. `GroupCoordinator.all_gather_into_tensor` sends every
  call through this custom op (opaque to Dynamo), registered for the CUDA dispatch key only,
  unless SGLang runs as the sgl_kernel CPU engine (`_is_cpu`, `SGLANG_USE_CPU_ENGINE=1`); a CPU
  tensor from a CUDA build of torch reaches the dispatcher and finds no kernel. SGLang's DFLASH
  draft argmax and its logits gathers call this method. For CPU tensors the stand-in takes the
  method's own CPU-engine branch, `_all_gather_into_tensor` (the op's body: gloo's
  all_gather_into_tensor here); the method is the op's only caller.
"""

from __future__ import annotations

import torch

PARALLEL_GROUP_TARGET = "sglang.srt.distributed.parallel_state.init_model_parallel_group"
ALL_GATHER_TARGET = "sglang.srt.distributed.parallel_state.GroupCoordinator.all_gather_into_tensor"


def pynccl_unusable(backend: str, device: torch.device) -> bool:
    """PyNccl needs a CUDA device; a gloo group on the CPU device has none."""
    return backend == "gloo" and device.type == "cpu"


def group_without_pynccl_on_cpu(original, group_ranks, local_rank, backend, *args, **kwargs):
    """AROUND init_model_parallel_group: no PyNccl for a gloo group on the CPU device."""
    from sglang.srt.distributed.parallel_state import _group_coordinator_device

    if pynccl_unusable(backend, _group_coordinator_device(local_rank)):
        if args:  # use_pynccl is the first optional positional parameter
            args = (False, *args[1:])
        else:
            kwargs["use_pynccl"] = False
    return original(group_ranks, local_rank, backend, *args, **kwargs)


def all_gather_into_tensor_on_cpu(original, group, output, input):
    """AROUND GroupCoordinator.all_gather_into_tensor: CPU tensors skip the CUDA-only op."""
    if output.device.type != "cpu":
        return original(group, output, input)
    return group._all_gather_into_tensor(output, input)
