"""A server's CPU time by phase, without a profiler: the clock bench/plain_step_cpu.py puts in a
server's processes.

py-spy pauses the process it samples (a no-spec server ran 4x slower under it) and cProfile
inflates every Python call; both moved the small differences issue 64 asks about. This clock
wraps a few functions the scheduler process calls once a step (SGLang's and ours, `PHASES`) and
adds up each call's thread CPU time (`time.thread_time`, the scheduler's own thread: wrapped calls
nest, so a phase includes the phases it calls). The sums go to `<prefix>.<pid>` every
`DUMP_EVERY` seconds, with the process's own CPU time, where the tool reads them before and
after a load.

A server gets it through `sitecustomize_dir(root)`: a folder for PYTHONPATH whose
`sitecustomize.py` calls `install` at every interpreter's start (the scheduler is spawned, so it
runs there too); `install` wraps each module of `PHASES` as it is first imported.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "DFLASH_PHASE_CLOCK"  # the dump files' prefix: the tool's own, not a server switch
DUMP_EVERY = 1.0  # seconds
# (module, class, method): what a decode step calls once, on every server, or on ours.
PHASES = [
    ("sglang.srt.managers.scheduler", "Scheduler", "run_batch"),  # the step, forward included
    ("sglang.srt.managers.scheduler", "Scheduler", "get_next_batch_to_run"),  # its planning
    ("sglang.srt.managers.scheduler", "Scheduler", "process_batch_result"),  # its results
    ("sglang.srt.model_executor.model_runner", "ModelRunner", "forward"),  # every model forward
    ("dflash_sglang.width.controller", "VerifyWidth", "choose"),
    ("dflash_sglang.step.drafting", "Drafting", "__call__"),
    ("dflash_sglang.step.verifying", "Verifying", "__call__"),
    ("dflash_sglang.step.committing", "Committing", "__call__"),
    # A hybrid target's recurrent state (None: a module's function): the verify's GDN layers, the
    # commit, and the CPU stand-ins each path runs (a state per position, or SGLang's ring).
    ("sglang.srt.layers.attention.linear.gdn_backend", "GDNAttnBackend", "forward_extend"),
    ("dflash_sglang.step.hybrid", "RecurrentStateCommit", "__call__"),
    ("dflash_sglang.cpu.gated_deltanet.chunk_and_decode", None, "sigmoid_gating_delta_rule_update_on_cpu"),
    ("dflash_sglang.cpu.gated_deltanet.replayssm", None, "gdn_replayssm_spec_decode_on_cpu"),
    ("dflash_sglang.cpu.gated_deltanet.replayssm", None, "commit_gdn_replayssm_circular_on_cpu"),
]
PROCESS = "process"  # the dump's line for the whole process's CPU time


def install() -> None:
    """Wrap the phases as their modules load, and dump the sums (a no-op without ENV)."""
    prefix = os.environ.get(ENV)
    if not prefix:
        return
    sums: dict[str, list] = {}
    sys.meta_path.insert(0, _Wrapper(sums))
    threading.Thread(target=_dump_forever, args=(prefix, sums), daemon=True).start()


class _Wrapper(importlib.abc.MetaPathFinder):
    def __init__(self, sums: dict):
        self.sums = sums
        self.modules = {module for module, _, _ in PHASES}

    def find_spec(self, name, path, target=None):
        if name not in self.modules:
            return None
        sys.meta_path.remove(self)  # the real spec, found by the other finders
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            for module_name, owner, method in PHASES:
                if module_name == name:
                    _time_calls(module if owner is None else getattr(module, owner), method, self.sums)

        spec.loader.exec_module = exec_module
        return spec


def _time_calls(owner, method: str, sums: dict) -> None:
    key = f"{owner.__name__.rsplit('.', 1)[-1]}.{method}"
    sums[key] = [0.0, 0]
    inner = getattr(owner, method)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            sums[key][0] += time.thread_time() - start
            sums[key][1] += 1

    setattr(owner, method, timed)


def _dump_forever(prefix: str, sums: dict) -> None:
    path = Path(f"{prefix}.{os.getpid()}")
    while True:
        time.sleep(DUMP_EVERY)
        if any(calls for _, calls in sums.values()):
            lines = [f"{key} {seconds:.6f} {calls}" for key, (seconds, calls) in list(sums.items())]
            lines.append(f"{PROCESS} {time.process_time():.6f} 0")
            try:
                path.write_text("\n".join(lines) + "\n")
            except OSError:  # its folder is gone: nobody reads it any more
                return


def read(prefix: str) -> dict[str, tuple[float, int]]:
    """The latest sums of every process that dumped under `prefix`: {phase: (seconds, calls)}."""
    out = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*"):
        for line in path.read_text().splitlines():
            key, seconds, calls = line.split()
            out[key] = (float(seconds), int(calls))
    return out


def sitecustomize_dir(root: Path) -> Path:
    """A folder whose sitecustomize.py installs the clock (for a server's PYTHONPATH)."""
    folder = Path(tempfile.mkdtemp(prefix="phase-clock-", dir=root))
    # Loaded by its path, not as dflash_sglang_tools.bench.phase_clock: the package imports the plugin,
    # which no interpreter should import before SGLang does (this runs first in every one).
    (folder / "sitecustomize.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('phase_clock', {str(Path(__file__).resolve())!r})\n"
        "clock = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(clock)\n"
        "clock.install()\n"
    )
    return folder
