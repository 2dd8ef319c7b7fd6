"""PD disaggregation on a cpu server: two places where the prefill side fences device work with
CUDA events before the transfer thread reads KV.

- `prefill._send_kv_chunk` lets a sender that declares `supports_host_tensor_indices` (Mooncake's)
  take its page indices as a pinned host copy of device data, fenced by a `torch.cuda.Event`. On a
  cpu server the indices already live on the host: the sender is told it does not take that path,
  and SGLang computes the page indices directly (`kv_to_page_indices`), as for other backends.
- `maybe_send_cached_prefix_chunk` sends a radix hit's cached prefix early, fenced by an event on
  the forward stream under the overlap loop. SGLang calls it an optional optimization: the final
  send covers the whole range. On a cpu server there is no stream to record on, so it is skipped.
"""

from __future__ import annotations

from .no_accelerator import has_accelerator

SENDER_INIT_TARGET = "sglang.srt.disaggregation.common.conn.CommonKVSender.__init__"
EARLY_SEND_TARGET = (
    "sglang.srt.disaggregation.prefill.SchedulerDisaggregationPrefillMixin.maybe_send_cached_prefix_chunk"
)


def sender_without_device_indices_on_cpu(original, sender, *args, **kwargs):
    """AROUND CommonKVSender.__init__: with no accelerator, page indices are plain host arrays."""
    original(sender, *args, **kwargs)
    if not has_accelerator():
        sender.supports_host_tensor_indices = False


def no_early_prefix_send_on_cpu(original, scheduler, *args, **kwargs):
    """AROUND maybe_send_cached_prefix_chunk: with no accelerator, the final send carries the prefix."""
    if has_accelerator():
        return original(scheduler, *args, **kwargs)
    return None
