"""Attention DP (`--enable-dp-attention`) on a cpu server.

- Under attention DP, SGLang pads every DP rank's batch to the same shape before the MLP sync
(`ForwardBatch._pad_inputs_to_size`) and fills the padded requests' sequence lengths with the
backend's `get_cuda_graph_seq_len_fill_value()`. torch_native does not define it (the base class
raises NotImplementedError). 1 is what the paged GPU backends answer: a padded request reads one
slot (the pool's reserved padding slot 0) and its output is discarded.
- The DP gather and scatter copy each rank's rows into the shared buffer with `memcpy`, which is
  SGLang's Triton kernel unless SGLang runs as its CPU-only build; SGLang's own `memcpy_cpu` does
  the same copy in torch, and is used for CPU tensors.
"""

from __future__ import annotations

FILL_VALUE_TARGET = (
    "sglang.srt.layers.attention.base_attn_backend.AttentionBackend.get_cuda_graph_seq_len_fill_value"
)
MEMCPY_TARGET = "sglang.srt.layers.dp_attention.memcpy"


def padded_seq_len_one_for_torch_native(original, backend):
    """AROUND AttentionBackend.get_cuda_graph_seq_len_fill_value: 1 for torch_native."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    if isinstance(backend, TorchNativeAttnBackend):
        return 1
    return original(backend)


def memcpy_on_cpu(original, dst, src, dim, offset, sz, offset_src):
    """AROUND dp_attention.memcpy: SGLang's torch copy for CPU tensors."""
    if dst.device.type != "cpu":
        return original(dst, src, dim, offset, sz, offset_src)
    from sglang.srt.layers.dp_attention import memcpy_cpu

    return memcpy_cpu(dst, src, dim, offset, sz, offset_src)
