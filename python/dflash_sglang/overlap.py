"""DFlashOverlapWorker: our DFLASH worker under SGLang's overlap loop (spec v2)."""

from __future__ import annotations

from sglang.srt.runtime_context import get_memory

from .runtime.streams import drafter_stream_wanted
from .worker import DFlashWorker


class DFlashOverlapWorker(DFlashWorker):
    """The same step under SGLang's overlap scheduler (`SGLANG_ENABLE_SPEC_V2=1`): the host plans
    step t+1 once `on_publish` has the new lengths, while the GPU finishes step t; the drafter's
    work runs on its own CUDA stream, overlapping the target's tail (docs/overlap.md)."""

    schedule = "overlap"

    def wants_drafter_stream(self, server_args) -> bool:
        # Hierarchical cache and the unified pool move KV on their own streams, ordered only
        # against the forward stream: keep draft-KV writes there.
        memory = get_memory()
        if memory.enable_hierarchical_cache or memory.enable_unified_memory:
            return False
        return drafter_stream_wanted()  # DFLASH_SGLANG_DRAFTER_STREAM=0: A/B timings
