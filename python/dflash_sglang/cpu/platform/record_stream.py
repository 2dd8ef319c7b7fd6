"""`Tensor.record_stream` on CPU tensors.

record_stream tells CUDA's caching allocator that another stream still reads a tensor; CPU
tensors have no caching allocator, and torch raises for them. SGLang's DFLASH decode step calls
it unconditionally on `batch.seq_lens` with `torch.cpu`'s stub stream, so for CPU tensors the
faithful stand-in is to do nothing.
"""

from __future__ import annotations

TARGET = "torch.Tensor.record_stream"


def record_stream_on_cpu(original, tensor, stream):
    """AROUND Tensor.record_stream: no-op for CPU tensors, torch's own otherwise."""
    if tensor.device.type != "cpu":
        return original(tensor, stream)
    return None
