"""`make bench-plain-step`: a plain step's CPU cost against no-spec's decode step, with repeats.

    python -m dflash_sglang_tools.bench.plain_step_cpu [--repeats 3] [--concurrency 1,8]

Issue 64's bar for a step that verifies no draft: the scheduler's CPU milliseconds per 100 output
tokens within 5% of a no-spec server's, at concurrency 1 and 8, greedy and at T 1.0. py-spy
(bench/step_profile.py) pauses the process it samples (no-spec ran 4x slower under it), so this
tool runs no profiler: the scheduler process's CPU time over each level (every thread of it), per
100 output tokens, and split by bench/phase_clock.py's clock into the model forwards and the rest
(the step's own work, the scheduler's planning and its result processing). Each server runs on one
OpenMP thread (ONE_THREAD) under `--sleep-on-idle`.

One server a configuration moved by 5-10% between launches here, in its model forwards as much as
in anything, so each repeat starts every server once, in a rotated order (no-spec first in one
repeat, last in another), and each serves every (temperature, concurrency) level. Reported per
level: each column's median over the repeats, and the paired ratio to no-spec's in the same repeat
(median and range). Within one launch every phase moved with the model forward (a launch that ran
its forwards 40% slower ran its scheduler 40% slower too), so the headline is the CPU per token
over the same process's forward CPU per token: a plain step's forward is SGLang's decode forward
(step/plain_forward.py), the same work on both servers, and that ratio held within 1% across
launches where the raw CPU per token moved by 40%. The columns besides it are CPU ms per 100
tokens: in all, the model forwards, the step's own work beside its forward ("step": the
scheduler's run_batch less the forwards), the scheduler's planning of the next batch and its
result processing, and our step's phases (the width choice, the draft, the commit).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from dflash_sglang.environment import VERIFY_WIDTHS

from ..testing.server import CPU_ARGS, SGLangServer
from . import phase_clock
from .cli import concurrency_list
from .client import Sampling, run_level
from .level_stats import summarize
from .prompts import load_prompts, take
from .server_info import describe
from .step_profile import Server
from .tiny_prompts import EMBEDDED_PAIR

BASELINE = "no-spec"
SERVERS = [
    Server(BASELINE, speculative=False),
    Server("ours, width 1 (plain loop)", {VERIFY_WIDTHS.name: "1"}),
    Server("ours, width 1 (overlap loop)", {VERIFY_WIDTHS.name: "1", "SGLANG_ENABLE_SPEC_V2": "1"}),
    Server("ours as launched (plain loop)"),
]
BLOCK = 8  # the embedded pair's
# One OpenMP thread a server: with more, torch's idle workers spin between ops and their CPU time
# (about 40% of a no-spec server's at concurrency 1 here) measures the spinning, not the step; and
# one server's CPU time moved by 40% between launches with them, 10% without.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def measure(entry: Server, pair: Path, prompts, levels, clock_root: Path) -> dict:
    """One server: its CPU ms per 100 output tokens at each (temperature, concurrency), in all
    and by phase (bench/phase_clock.py)."""
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", (pair / "draft").resolve(),
            "--speculative-num-draft-tokens", BLOCK] if entry.speculative else []  # fmt: skip
    prefix = str(clock_root / re.sub(r"[^a-z0-9]+", "-", entry.label))
    clock = {"PYTHONPATH": str(phase_clock.sitecustomize_dir(clock_root)), phase_clock.ENV: prefix}
    out, env = {}, {**ONE_THREAD, **clock, **entry.env}
    with SGLangServer((pair / "target").resolve(), args, env=env, base_args=CPU_ARGS) as server:
        model = describe(server.base_url, entry.label).model
        for temperature, concurrency in levels:
            sampling = Sampling(max_tokens=128, temperature=temperature)
            asyncio.run(run_level(server.base_url, model, prompts[:2], sampling, 2, "warm-up"))
            before = settled(prefix)
            done, duration = asyncio.run(
                run_level(server.base_url, model, prompts, sampling, concurrency, entry.label)
            )
            after = settled(prefix)
            level = summarize(done, concurrency, duration, BLOCK)
            per_100 = 1000.0 * 100.0 / max(level.output_tokens, 1)  # seconds -> ms per 100 tokens
            ms = {key: (after[key][0] - before.get(key, (0.0, 0))[0]) * per_100 for key in after}
            tokens_per_s = round(level.output_throughput, 1)
            out[f"T{temperature} c{concurrency}"] = {**columns(ms), "tokens_per_s": tokens_per_s}
    return out


def settled(prefix: str) -> dict:
    """The clock's sums once the last step's have been dumped (the server is idle between levels)."""
    time.sleep(2.5 * phase_clock.DUMP_EVERY)
    return phase_clock.read(prefix)


def columns(ms: dict) -> dict:
    """A level's CPU ms per 100 tokens: in all, the model forwards, and the step's and the
    scheduler's own work (what is not a forward)."""
    forward = ms.get("ModelRunner.forward", 0.0)
    step = ms.get("Scheduler.run_batch", 0.0) - forward
    ours = {name: ms.get(key, 0.0) for name, key in OUR_PHASES.items()}
    return {
        "total": round(ms[phase_clock.PROCESS], 2),
        "forward": round(forward, 2),
        "not_forward": round(ms[phase_clock.PROCESS] - forward, 2),
        "step_not_forward": round(step, 2),
        "planning": round(ms.get("Scheduler.get_next_batch_to_run", 0.0), 2),
        "results": round(ms.get("Scheduler.process_batch_result", 0.0), 2),
        **{name: round(value, 2) for name, value in ours.items()},
    }


# Our step's phases (the verify's includes its forward).
OUR_PHASES = {"width": "VerifyWidth.choose", "draft": "Drafting.__call__", "verify": "Verifying.__call__",
              "commit": "Committing.__call__"}  # fmt: skip


def rotated(servers: list[Server], repeat: int) -> list[Server]:
    """Each repeat starts at the next server: no server always runs first (or last)."""
    shift = repeat % len(servers)
    return servers[shift:] + servers[:shift]


def per_forward(cell: dict) -> float:
    """CPU per token over the same process's forward CPU per token: its own speed divided out."""
    return cell["total"] / cell["forward"]


QUOTIENTS = {"total": lambda cell: cell["total"], "not_forward": lambda cell: cell["not_forward"],
             "per_forward": per_forward}  # fmt: skip


def summary(runs: list[dict]) -> list[dict]:
    """Per level and server: each column's median over the repeats, and the paired ratios to
    no-spec's (of the CPU in all, of what is not a forward, and of the CPU per forward)."""
    rows = []
    for level in runs[0][BASELINE]:
        for label in [s.label for s in SERVERS if s.label in runs[0]]:
            cells = [run[label][level] for run in runs]
            bases = [run[BASELINE][level] for run in runs]
            row = {"level": level, "server": label}
            row.update({name: round(statistics.median(cell[name] for cell in cells), 1) for name in cells[0]})
            row["per_forward"] = round(statistics.median(map(per_forward, cells)), 3)
            for name, value in QUOTIENTS.items():
                ratios = [value(cell) / value(base) for cell, base in zip(cells, bases, strict=True)]
                row[f"{name}_vs_no_spec"] = round(statistics.median(ratios), 3)
                row[f"{name}_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
            rows.append(row)
    return rows


def ratio(row: dict, name: str) -> str:
    low, high = row[f"{name}_range"]
    return f"{row[name + '_vs_no_spec']:.3f}x ({low:.2f}-{high:.2f})"


def table(rows: list[dict]) -> str:
    head = ["level", "server", "CPU per forward", "x no-spec", "total", "x no-spec", "forward", "step",
            "planning", "results", "width", "draft", "commit"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["level"], r["server"], r["per_forward"], ratio(r, "per_forward"), r["total"],
                 ratio(r, "total"), r["forward"], r["step_not_forward"], r["planning"], r["results"],
                 r["width"], r["draft"], r["commit"]]  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 8])
    p.add_argument("--temperatures", default="0,1.0", help="comma-separated")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--only", default=None, help="server labels besides no-spec, ';'-separated")
    p.add_argument("--out", type=Path, default=Path("docs/bench/plain-step-cpu.json"))
    p.add_argument("--table", action="store_true", help="print the table of the run saved at --out")
    args = p.parse_args(argv)
    if args.table:
        saved = json.loads(args.out.read_text())
        print(table(summary(saved["runs"])))
        return
    wanted = None if args.only is None else {BASELINE, *args.only.split(";")}
    servers = [s for s in SERVERS if wanted is None or s.label in wanted]
    prompts = take(load_prompts("tiny", pair_dir=args.pair), args.num_prompts)
    levels = [(float(t), c) for t in args.temperatures.split(",") for c in args.concurrency]
    runs, clock_root = [], Path(tempfile.mkdtemp(prefix="plain-step-cpu-"))
    for repeat in range(args.repeats):
        root = clock_root / str(repeat)
        root.mkdir()
        runs.append({s.label: measure(s, args.pair, prompts, levels, root) for s in rotated(servers, repeat)})
        print(table(summary(runs)), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "summary": summary(runs)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
