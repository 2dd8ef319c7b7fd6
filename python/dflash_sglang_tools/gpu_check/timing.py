"""Median timings (CUDA events on a GPU) and CUDA-graph capture that reports failure instead of raising."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

NOT_ON_CPU = "n/a on cpu"


def median_ms(
    fn: Callable[[], Any], device: torch.device, iters: int, warmup: int, after: Callable[[], None] = None
) -> float:
    """Median wall time of `fn` in ms; `after` (e.g. a cache reset) runs between calls, untimed."""
    after = after or (lambda: None)
    for _ in range(warmup):
        fn()
        after()
    if device.type != "cuda":
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - start))
            after()
        return statistics.median(times)
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(iters)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        fn()
        end.record()
        after()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


class Captured:
    """A CUDA graph of `fn` whose outputs live in static tensors, or the reason it could not be made."""

    def __init__(self, fn: Callable[[], Any], device: torch.device, after: Callable[[], None] = None):
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: Any = None
        self.status = NOT_ON_CPU
        if device.type != "cuda":
            return
        after = after or (lambda: None)
        body_error: list[Exception] = []  # a failed capture raises again on exit; keep the first

        def body() -> Any:
            try:
                return fn()
            except Exception as e:
                body_error.append(e)
                raise

        try:
            # Warm up on a side stream (lazy inits, cuBLAS workspaces) as torch.cuda.graphs asks.
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    fn()
                    after()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.outputs = body()
            torch.cuda.synchronize()
            self.graph, self.status = graph, "ok"
        except Exception as e:  # a host sync or an allocation the capture cannot take
            self.outputs, self.status = None, "capture failed: " + describe((body_error or [e])[0])
            _settle()

    @property
    def ok(self) -> bool:
        return self.graph is not None

    def replay(self) -> None:
        self.graph.replay()

    def release(self) -> None:
        """Free the graph's private memory pool before the next, larger model is built."""
        self.graph = self.outputs = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def describe(error: BaseException) -> str:
    """`Type: first line of the message`, short enough for a table cell."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}"[:200]


def _settle() -> None:
    try:
        torch.cuda.synchronize()
    except Exception:  # an invalidated capture can surface once more here; the context stays usable
        pass


def replay_vs_eager(replayed: Any, eager: Any) -> str:
    equal, diff = same(replayed, eager)
    return "equal" if equal else f"differs (max {diff:.3g})"


def same(a: Any, b: Any) -> tuple[bool, float]:
    """(bitwise equal, max abs difference) of two tensors or tuples of tensors."""
    pairs = list(zip(a, b, strict=True)) if isinstance(a, tuple | list) else [(a, b)]
    equal = all(torch.equal(x, y) for x, y in pairs)
    diff = max((x.float() - y.float()).abs().max().item() if x.numel() else 0.0 for x, y in pairs)
    return equal, diff
