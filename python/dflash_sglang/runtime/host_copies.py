"""Device results the host wants a step later, copied without waiting (no host sync).

On a GPU the copy goes to pinned memory behind a CUDA event, and the host reads it once the event
has passed, a step or so later: it never waits, so the overlap loop keeps overlapping (as the step
timings in width/step_times.py never wait). On a CPU the copy is there at once; it is still handed over
only at the next `landed()`, so the CPU path exercises the same lag the GPU path has.
"""

from __future__ import annotations

from collections import deque

import torch

from . import host_sync


class LaggedHostCopies:
    def __init__(self, device):
        self.on_gpu = torch.device(device).type == "cuda"
        self.pending: deque = deque()

    def put(self, tensor: torch.Tensor, tag) -> None:
        """Start copying `tensor` to the host; `tag` comes back with it."""
        if self.on_gpu:
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host, done = tensor.clone(), None
        self.pending.append((tag, host, done))

    def landed(self):
        """(tag, host tensor) of every copy that has finished, oldest first; never waits."""
        while self.pending and (self.pending[0][2] is None or self.pending[0][2].query()):
            tag, host, _ = self.pending.popleft()
            host_sync.landed_on_host(host)  # a finished copy in host memory: reading it is free
            yield tag, host
