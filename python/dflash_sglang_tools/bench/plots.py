"""PNG plots of a BenchRun (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from .level_stats import pooled_levels, speedup  # noqa: E402
from .report import speculative  # noqa: E402
from .results import BenchRun  # noqa: E402


def _save(figure, path: Path) -> str:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path.name


def _by_concurrency(run: BenchRun, title: str, ylabel: str, value) -> plt.Figure:
    figure, axes = plt.subplots(figsize=(6, 4))
    for server in run.servers:
        points = [(lv.concurrency, value(server, lv)) for lv in server.levels]
        points = [(c, v) for c, v in points if v is not None]
        if points:
            axes.plot(*zip(*points, strict=True), marker="o", label=server.label)
    axes.set(title=title, xlabel="concurrency", ylabel=ylabel)
    axes.set_xscale("log", base=2)
    axes.minorticks_off()
    axes.set_xticks(run.concurrencies, [str(c) for c in run.concurrencies])
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return figure


def plot_all(run: BenchRun, out_dir: str | Path, prefix: str = "") -> list[str]:
    """Writes the plots into out_dir; returns their file names."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [
        _save(_by_concurrency(run, "Output throughput", "tokens / s", lambda s, lv: lv.output_throughput),
              out / f"{prefix}throughput.png"),
        _save(_by_concurrency(run, "Time per output token (mean)", "ms", lambda s, lv: lv.tpot_ms.mean),
              out / f"{prefix}tpot.png"),
    ]  # fmt: skip
    baseline = run.server(run.baseline) if run.baseline else None
    if baseline:

        def ratio(server, level):
            return None if server is baseline else speedup(level, baseline.level(level.concurrency))

        figure = _by_concurrency(run, f"Speedup vs {baseline.label}", "x", ratio)
        axes = figure.axes[0]  # the baseline's level: a server crosses it where it stops paying
        axes.axhline(1.0, color="gray", linestyle="--", linewidth=1, label=f"{baseline.label} (1.0x)")
        axes.legend(fontsize=8)
        names.append(_save(figure, out / f"{prefix}speedup.png"))
    pooled = [(s.label, pooled_levels(s.levels, s.block_size)) for s in speculative(run)]
    pooled = [(label, acc) for label, acc in pooled if acc.histogram]
    if pooled:
        names.append(_save(_histogram(pooled), out / f"{prefix}acceptance_histogram.png"))
        names.append(_save(_positions(pooled), out / f"{prefix}position_acceptance.png"))
    return names


def _histogram(pooled) -> plt.Figure:
    figure, axes = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(pooled)
    for i, (label, acc) in enumerate(pooled):
        shares = [100 * c / acc.verify_steps for c in acc.histogram]
        axes.bar([k + i * width for k in range(len(shares))], shares, width=width, label=label)
    axes.set(title="Accepted drafts per verify step", xlabel="accepted drafts", ylabel="% of verify steps")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3, axis="y")
    return figure


def _positions(pooled) -> plt.Figure:
    figure, axes = plt.subplots(figsize=(7, 4))
    for label, acc in pooled:
        positions = range(1, len(acc.position_accepted) + 1)
        axes.plot(positions, [100 * p for p in acc.position_accepted], marker="o", label=label)
    axes.set(title="Per-position acceptance", xlabel="block position k", ylabel="% of steps accepting k",
             ylim=(0, 100))  # fmt: skip
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    return figure
