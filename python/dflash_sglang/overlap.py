"""DFlashOverlapWorker: our DFLASH worker under SGLang's overlap loop (spec v2)."""

from __future__ import annotations

from .worker import DFlashWorker


class DFlashOverlapWorker(DFlashWorker):
    """The same step under SGLang's overlap scheduler (`SGLANG_ENABLE_SPEC_V2=1`): the host plans
    step t+1 once `on_publish` has the new lengths, while the GPU finishes step t; the drafter's
    work runs on its own CUDA stream, overlapping the target's tail (docs/overlap.md). Its settings
    (settings.py) say where the stream stays off (runtime/streams.py's drafter_stream_off_because)."""

    schedule = "overlap"
