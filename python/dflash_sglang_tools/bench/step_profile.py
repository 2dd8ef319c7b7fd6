"""`make bench-step-profile`: where a decode step's time goes, ours against SGLang's built-in, by phase.

    python -m dflash_sglang_tools.bench.step_profile --concurrency 1,4,8 --num-prompts 64

Each server (the tiny pair on CPU, one at a time) serves the same load while py-spy samples its
scheduler process (`py-spy record --format raw`, the stacks with line numbers). Each sample is put
in a phase by its frames: the worker's `forward_batch_generation` split into prefill, width choice,
draft, verify and commit (ours by the module each phase lives in, the built-in's by the line ranges
of its one long function), each split again into model forwards (SGLang's `ModelRunner.forward`)
and the step's own work; everything the scheduler does outside the worker is "scheduler". The
table gives the scheduler's CPU milliseconds per 100 output tokens (its CPU time over the load, from
psutil, shared out by the samples), so servers that take different steps compare, and a machine
busy with other work slows the wall clock more than the count.

py-spy is not a dependency of the project (`pip install py-spy`); the tool says so when it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from dflash_sglang.environment import ADAPTIVE_WIDTH, VERIFY_WIDTHS, WORKER

from ..testing.server import CPU_ARGS, SGLangServer
from .cli import concurrency_list
from .client import Sampling, run_level
from .level_stats import summarize
from .prompts import load_prompts, take
from .server_info import describe
from .tiny_prompts import EMBEDDED_PAIR

RATE = 100  # samples a second
PY_SPY = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


@dataclass
class Server:
    label: str
    env: dict = field(default_factory=dict)
    speculative: bool = True  # False: the same target without speculation (SGLang's own decode step)


SERVERS = [
    Server("no-spec", speculative=False),
    Server("ours (plain loop, width 1)", {VERIFY_WIDTHS.name: "1"}),
    Server("ours (overlap loop, width 1)", {VERIFY_WIDTHS.name: "1", "SGLANG_ENABLE_SPEC_V2": "1"}),
    Server("ours (plain loop, as launched)"),
    Server("ours (overlap loop, as launched)", {"SGLANG_ENABLE_SPEC_V2": "1"}),
    Server("ours (plain loop, whole blocks)", {ADAPTIVE_WIDTH.name: "0"}),
    Server("sglang built-in", {WORKER.name: "builtin"}),
]

OUR_WORKER = "dflash_sglang/worker.py"
# A no-spec server's step: SGLang's TpModelWorker runs the forward and samples.
PLAIN_WORKER = "managers/tp_worker.py"
BUILTIN_WORKER = "dflash_worker_v2.py"
# The built-in's forward_batch_generation (SGLang 0.5.23), by its own "--- n)" comments.
BUILTIN_PHASES = [(2345, 2424, "prefill"), (2424, 2488, "idle"), (2488, 2819, "draft"),
                  (2819, 2975, "verify"), (2975, 3015, "commit")]  # fmt: skip
# Ours: the phase is the module the worker's step calls into.
OUR_PHASES = [("/width/", "width choice"), ("/step/drafting", "draft"), ("/step/chain_drafts", "draft"),
              ("/step/tree_drafting", "draft"), ("/step/verifying", "verify"), ("/step/committing", "commit"),
              ("/step/step_record", "record"), ("/sampling/penalties", "penalties")]  # fmt: skip
OUR_CLASSES = {"VerifyWidth": "width choice", "Drafting": "draft", "Verifying": "verify",
               "Committing": "commit", "StepRecord": "record"}  # fmt: skip
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*):(?P<line>\d+)\)$")


def phase_of(frames: list[str]) -> str:
    """The phase one sample's stack (outermost first) was in."""
    for depth, frame in enumerate(frames):
        match = FRAME.match(frame.strip())
        if not match or match["func"].split(".")[-1] != "forward_batch_generation":
            continue
        inner = frames[depth + 1 :]
        if match["file"].endswith(BUILTIN_WORKER):
            line = int(match["line"])
            phase = next((name for lo, hi, name in BUILTIN_PHASES if lo <= line < hi), "other")
        elif match["file"].endswith(OUR_WORKER):
            phase = our_phase(match["func"], inner)
        elif match["file"].endswith(PLAIN_WORKER):
            phase = "verify"  # the target's one forward and its sampling: the verify's columns
        else:
            continue
        return f"{phase}: {'model' if any(is_model(f) for f in inner) else 'step'}"
    return "scheduler"


def our_phase(func: str, inner: list[str]) -> str:
    first = FRAME.match(inner[0].strip()) if inner else None
    if first is None:
        return "step itself"
    if first["file"].endswith(OUR_WORKER):
        return first["func"].split(".")[-1]
    by_file = next((name for part, name in OUR_PHASES if part in first["file"]), None)
    owner = first["func"].split(".")[0]
    return by_file or OUR_CLASSES.get(owner, first["func"])


def is_model(frame: str) -> bool:
    match = FRAME.match(frame.strip())
    return (
        bool(match)
        and match["func"].split(".")[-1] == "forward"
        and match["file"].endswith("model_runner.py")
    )


def scheduler_pid(server: SGLangServer) -> int:
    root = psutil.Process(server.process.pid)
    for child in root.children(recursive=True):
        if "scheduler" in " ".join(child.cmdline()) or "scheduler" in child.name():
            return child.pid
    raise RuntimeError("no scheduler process under the server")


def profile(entry: Server, pair: Path, prompts, sampling: Sampling, concurrency: int, out: Path) -> dict:
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", (pair / "draft").resolve(),
            "--speculative-num-draft-tokens", 8] if entry.speculative else []  # fmt: skip
    server = SGLangServer((pair / "target").resolve(), args, env=entry.env, base_args=CPU_ARGS)
    with server:
        model = describe(server.base_url, entry.label).model
        asyncio.run(run_level(server.base_url, model, prompts[:2], sampling, 2, "warm-up"))
        raw = out / f"{re.sub(r'[^a-z0-9]+', '-', entry.label)}-c{concurrency}.txt"
        spy = subprocess.Popen(
            [PY_SPY, "record", "--pid", str(scheduler_pid(server)), "--format", "raw", "--full-filenames",
             "--rate", str(RATE), "--output", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)
        scheduler = psutil.Process(scheduler_pid(server))
        before = scheduler.cpu_times()
        done, duration = asyncio.run(
            run_level(server.base_url, model, prompts, sampling, concurrency, entry.label)
        )
        after = scheduler.cpu_times()
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    level = summarize(done, concurrency, duration, 8)
    phases = phases_of(raw)
    # The scheduler's CPU time (robust to other load on the machine), split by the samples' shares.
    cpu_ms = 1000.0 * (after.user + after.system - before.user - before.system)
    per_100 = cpu_ms * 100.0 / max(level.output_tokens, 1) / max(sum(phases.values()), 1)
    return {
        "server": entry.label, "concurrency": concurrency, "tokens_per_s": level.output_throughput,
        "accept_length": level.acceptance.accept_length,
        "ms_per_100_tokens": {k: round(v * per_100, 2) for k, v in sorted(phases.items())},
    }  # fmt: skip


COLUMNS = ["scheduler", "prefill", "width choice", "draft: model", "draft: step", "verify: model",
           "verify: step", "commit", "other"]  # fmt: skip


def column(phase: str) -> str:
    """A phase's column: model forwards apart only where they are the phase's bulk."""
    if phase in COLUMNS:
        return phase
    name = phase.split(":")[0]
    return name if name in COLUMNS else "other"


def table(results: list[dict]) -> str:
    head = ["server", "c", "tok/s", "accept", "total", *COLUMNS]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ms = Counter()
        for phase, value in r["ms_per_100_tokens"].items():
            ms[column(phase)] += value
        cells = [r["server"], r["concurrency"], f"{r['tokens_per_s']:.1f}", f"{r['accept_length'] or 0:.2f}",
                 f"{sum(ms.values()):.0f}", *(f"{ms[c]:.0f}" for c in COLUMNS)]  # fmt: skip
        rows.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(rows)


# The scheduler's own thread. py-spy also samples its watchdog and tqdm monitor threads, asleep in
# a wait it does not always see as idle: a third to a half of a server's samples, which shared out
# the CPU time as if they were the scheduler's work.
MAIN_THREAD = "run_scheduler_process"


def phases_of(raw: Path) -> Counter:
    """Samples by phase in one py-spy raw file, the scheduler's own thread only."""
    phases = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if any(MAIN_THREAD in frame for frame in frames):
            phases[phase_of(frames)] += int(count)
    return phases


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 4, 8])
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--only", default=None, help="server labels, ';'-separated (default: all)")
    p.add_argument("--out", type=Path, default=Path("docs/bench/step-profile.json"))
    args = p.parse_args(argv)
    if PY_SPY is None:
        sys.exit("make bench-step-profile needs py-spy: pip install py-spy")
    servers = [s for s in SERVERS if args.only is None or s.label in args.only.split(";")]
    prompts = take(load_prompts("tiny", pair_dir=args.pair), args.num_prompts)
    sampling = Sampling(max_tokens=args.max_tokens, temperature=args.temperature)
    raw_dir = Path(tempfile.mkdtemp(prefix="step-profile-"))
    results = [
        profile(s, args.pair, prompts, sampling, c, raw_dir) for c in args.concurrency for s in servers
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(f"raw stacks: {raw_dir}")


if __name__ == "__main__":
    main()
