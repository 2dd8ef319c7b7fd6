"""Benchmark servers over the concurrency levels, and write a run's files.

Each server gets a few warm-up requests first (not measured). Then level by level, and within a
level server after server (so a drift in the machine's load hits the server and its baseline
alike): flush the radix cache (every level sends the same prompts), send all prompts with at most
`concurrency` in flight, summarize.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
from pathlib import Path

from . import plots, report, results
from .client import Sampling, run_level
from .level_stats import summarize
from .machine_load import ForeignCpu
from .results import BenchRun, ServerRun
from .server_info import flush_cache


def bench_servers(
    servers: list[ServerRun],
    prompts: list[list[dict]],
    sampling: Sampling,
    concurrencies: list[int],
    warmup: int = 2,
) -> list[ServerRun]:
    for server in servers:
        if warmup:
            label = f"{server.label} warm-up"
            asyncio.run(run_level(server.url, server.model, prompts[:warmup], sampling, warmup, label))
    for concurrency in concurrencies:
        for server in servers:
            server.levels.append(measure(server, prompts, sampling, concurrency))
    return servers


def measure(server: ServerRun, prompts: list[list[dict]], sampling: Sampling, concurrency: int):
    flush_cache(server.url)
    label = f"{server.label} c={concurrency}"
    others = ForeignCpu()
    done, duration = asyncio.run(run_level(server.url, server.model, prompts, sampling, concurrency, label))
    failed = [r.error for r in done if r.error]
    if failed:
        print(f"{label}: {len(failed)}/{len(done)} requests failed: {failed[0]}")
    level = summarize(done, concurrency, duration, server.block_size)
    level.load_average = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    level.foreign_cpu = others.share(duration)
    return level


def new_run(
    dataset: str, num_prompts: int, sampling: Sampling, concurrencies: list[int], baseline=None
) -> BenchRun:
    return BenchRun(
        dataset=dataset,
        num_prompts=num_prompts,
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        concurrencies=list(concurrencies),
        baseline=baseline,
        created=datetime.datetime.now().isoformat(timespec="seconds"),
        machine=platform.machine(),
        cpus=_cpus(),
    )


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def write_outputs(run: BenchRun, out_dir: str | Path, name: str = "bench") -> dict[str, Path]:
    """`<name>.json`, `<name>.md` and `<name>_*.png` in out_dir."""
    out = Path(out_dir)
    pngs = plots.plot_all(run, out, prefix=f"{name}_")
    (out / f"{name}.md").write_text(report.markdown(run, pngs))
    return {"json": results.save(run, out / f"{name}.json"), "markdown": out / f"{name}.md",
            **{png: out / png for png in pngs}}  # fmt: skip
