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

from ..environment import DRAFTER_STREAM

ENV_FLAG = DRAFTER_STREAM.name


def drafter_stream_wanted() -> bool:
    """On unless DFLASH_SGLANG_DRAFTER_STREAM is off: the overlap worker with the drafter's work
    on main instead, to time a step with and without the second stream."""
    return DRAFTER_STREAM.value()


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
