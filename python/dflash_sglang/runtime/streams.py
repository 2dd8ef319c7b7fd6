"""The drafter's own CUDA stream, ordered against the target's stream by events.

Drafter-side work (the draft forward, writing committed target features into the draft KV pool)
runs on `DrafterStream`; target-side work (verify, acceptance, result copies, the scheduler's
planning of the next step) stays on the stream SGLang runs the step on ("main"). Three rules
keep it exact:

    run()    drafter work first waits for everything main has queued so far (its inputs), and
             the main-stream tensors it reads are recorded on the drafter stream, so the caching
             allocator does not hand their memory to main while the drafter still reads it
    join()   main waits for everything the drafter has queued, before it reads the drafts and
             at the start of every step, so no target forward overwrites buffers (CUDA-graph
             outputs, freed slots) that a queued injection still reads
    one pool the draft KV pool is written only on the drafter stream, so its writes (the
             draft's block, injections, a reused slot's new prompt) stay in program order

On CPU, or when disabled, both are no-ops and the step runs the same code in program order.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from sglang.srt.runtime_context import get_memory

from ..environment import DRAFTER_STREAM

ENV_FLAG = DRAFTER_STREAM.name


def drafter_stream_wanted() -> bool:
    """On unless DFLASH_SGLANG_DRAFTER_STREAM is off: the overlap worker with the drafter's work
    on main instead, to time a step with and without the second stream."""
    return DRAFTER_STREAM.value()


def drafter_stream_off_because(schedule: str, device) -> str | None:
    """Why the drafter's work stays on main (None: it runs on its own CUDA stream)."""
    if schedule != "overlap":  # the synchronous loop waits for every step anyway
        return "the synchronous schedule"
    # Hierarchical cache and the unified pool move KV on their own streams, ordered only
    # against the forward stream: keep draft-KV writes there.
    memory = get_memory()
    if memory.enable_hierarchical_cache or memory.enable_unified_memory:
        return "the hierarchical cache or the unified pool moves KV against the forward stream only"
    if not drafter_stream_wanted():
        return f"{ENV_FLAG}=0"  # A/B timings
    if torch.device(device).type != "cuda":
        return "no CUDA device"
    return None


class DrafterStream:
    def __init__(self, device, enabled: bool):
        device = torch.device(device)
        self.stream = torch.cuda.Stream(device) if enabled and device.type == "cuda" else None

    @property
    def active(self) -> bool:
        return self.stream is not None

    @contextmanager
    def run(self, *reads: torch.Tensor):
        """Queue the body on the drafter stream, after main's work so far."""
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.stream.device))
        for tensor in reads:
            tensor.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            yield

    def join(self) -> None:
        """Main waits for the drafter's work so far."""
        if self.stream is not None:
            torch.cuda.current_stream(self.stream.device).wait_stream(self.stream)
