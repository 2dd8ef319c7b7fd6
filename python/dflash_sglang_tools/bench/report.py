"""A BenchRun as markdown: the setup, one row per server and concurrency, the acceptance
histogram and per-position acceptance of each speculative server, one server against each other
repeat by repeat where asked, and a comparison with an earlier results file."""

from __future__ import annotations

import statistics

from .level_stats import distinct, paired_speedups, pooled_levels, sign_test, speedup
from .results import BenchRun, ServerRun


def fmt(value, digits: int = 1, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def setup(run: BenchRun) -> str:
    lines = [
        f"dataset **{run.dataset}**, {run.num_prompts} prompts per level, max_tokens {run.max_tokens}, "
        f"temperature {run.temperature:g}; {run.created}, {run.machine} client with {run.cpus} CPUs",
        "",
    ]
    if run.repeats > 1:
        lines.append(f"Each server ran {run.repeats} times (fresh servers, interleaved with the others'): "
                     "tok/s is the median (range), the speedup the median of the ratios to the baseline "
                     "run beside it (range); `~` marks a speedup whose repeats fall on both sides "
                     "of 1.\n")  # fmt: skip
    shares = [lv.foreign_cpu for s in run.servers for lv in s.levels if lv.foreign_cpu is not None]
    if shares:  # measured: other processes' share of the CPUs (the servers' own load is not interference)
        verdict = "**The machine was busy**" if max(shares) > BUSY_SHARE else "The machine was quiet"
        caveat = ": timings and speedups are not reliable; acceptance is" if max(shares) > BUSY_SHARE else ""
        lines.append(f"{verdict} (other processes took up to {max(shares):.0%} of its {run.cpus} CPUs "
                     f"during a level){caveat}.\n")  # fmt: skip
    elif load := busy(run):
        lines.append(f"**The client machine was busy** (1-minute load average up to {load:.1f} on {run.cpus} "
                     "CPUs): its timings and speedups are not reliable; acceptance is.\n")  # fmt: skip
    for server in run.servers:
        spec = (
            f"{server.algorithm}, block {server.block_size}, draft `{server.draft_model}`"
            if server.algorithm
            else "no speculation"
        )
        notes = f"; {server.notes}" if server.notes else ""
        lines.append(f"- **{server.label}**: `{server.model}` at {server.url}, {spec}{notes}")
    return "\n".join(lines)


BUSY_SHARE = 0.05  # other processes' share of the CPUs over a level above which timings are suspect


def busy(run: BenchRun) -> float | None:
    """The highest load average seen, where it exceeded the CPU count (CPU servers share them)."""
    loads = [lv.load_average for s in run.servers for lv in s.levels if lv.load_average is not None]
    return max(loads) if loads and run.cpus and max(loads) > run.cpus else None


def throughput_table(run: BenchRun) -> str:
    baseline = run.server(run.baseline) if run.baseline else None
    header = ["server", "concurrency", "output tok/s", "speedup", "TTFT mean / p99 (ms)",
              "TPOT mean / p99 (ms)", "accept length", "accept rate", "requests (errors)"]  # fmt: skip
    rows = []
    for server in run.servers:
        for level in server.levels:
            base_level = baseline.level(level.concurrency) if baseline else None
            ratio = speedup(level, base_level) if baseline else None
            acc = level.acceptance
            rate = None if acc.accept_rate is None else 100 * acc.accept_rate
            rows.append([
                server.label, str(level.concurrency), throughput_cell(level),
                "baseline" if server is baseline else speedup_cell(ratio, paired_speedups(level, base_level)),
                f"{fmt(level.ttft_ms.mean)} / {fmt(level.ttft_ms.p99)}",
                f"{fmt(level.tpot_ms.mean, 2)} / {fmt(level.tpot_ms.p99, 2)}",
                fmt(acc.accept_length, 2), fmt(rate, 1, "%"), f"{level.requests} ({level.errors})",
            ])  # fmt: skip
    return table(header, rows)


def throughput_cell(level) -> str:
    """The median over repeats with their range, or the one run's throughput."""
    if len(level.repeats) < 2:
        return fmt(level.output_throughput)
    return f"{fmt(level.output_throughput)} ({fmt(min(level.repeats))}-{fmt(max(level.repeats))})"


def speedup_cell(ratio, paired: list[float]) -> str:
    """A repeated ratio with its range; `~` marks one whose repeats fall on both sides of 1 (no
    difference claimed)."""
    if len(paired) < 2:
        return fmt(ratio, 2, "x")
    mark = "" if distinct(paired) else " ~"
    return f"{fmt(ratio, 2, 'x')} ({min(paired):.2f}-{max(paired):.2f}){mark}"


def speculative(run: BenchRun) -> list[ServerRun]:
    return [s for s in run.servers if any(lv.acceptance.verify_steps for lv in s.levels)]


def histogram_table(run: BenchRun) -> str:
    """Share of verify steps that accepted k drafts, all concurrency levels pooled."""
    servers = [(s, pooled_levels(s.levels, s.block_size)) for s in speculative(run)]
    servers = [(s, acc) for s, acc in servers if acc.histogram]
    if not servers:
        return "No server reported an acceptance histogram."
    width = max(len(acc.histogram) for _, acc in servers)
    rows = [[s.label, str(acc.verify_steps)] + [fmt(100 * c / acc.verify_steps, 1) for c in acc.histogram]
            + [""] * (width - len(acc.histogram)) for s, acc in servers]  # fmt: skip
    return table(["server", "verify steps", *[f"{k}" for k in range(width)]], rows)


def position_table(run: BenchRun) -> str:
    """Per block position k: % of steps whose k-th draft was accepted, and % given k-1 was."""
    servers = [(s, pooled_levels(s.levels, s.block_size)) for s in speculative(run)]
    servers = [(s, acc) for s, acc in servers if acc.position_accepted]
    if not servers:
        return "No server reported an acceptance histogram."
    width = max(len(acc.position_accepted) for _, acc in servers)
    rows = []
    for server, acc in servers:
        pad = [""] * (width - len(acc.position_accepted))
        rows.append([server.label, "accepted"] + [fmt(100 * p, 1) for p in acc.position_accepted] + pad)
        rows.append(
            ["", "given k-1"]
            + [fmt(None if p is None else 100 * p, 1) for p in acc.position_conditional]
            + pad
        )
    return table(["server", "% of steps", *[f"k={k}" for k in range(1, width + 1)]], rows)


def paired_table(run: BenchRun, label: str) -> str:
    """`label`'s tokens/s over each other speculative server's, repeat by repeat (the two ran side
    by side): the median ratio, its range, how many repeats were above 1, and the sign test of
    those counts pooled over every concurrency."""
    ours = run.server(label)
    rows = [ratio_row(run, ours, other) for other in speculative(run) if other is not ours]
    return ratio_table(ours, rows)


def against_table(run: BenchRun, reference: str) -> str:
    """Each other speculative server's tokens/s over `reference`'s (SGLang's built-in), paired by
    repeat as in paired_table."""
    base = run.server(reference)
    rows = [ratio_row(run, server, base) for server in speculative(run) if server is not base]
    return ratio_table(base, rows)


def ratio_row(run: BenchRun, numerator: ServerRun, denominator: ServerRun) -> list[str]:
    cells, above, trials = [], 0, 0
    for level in numerator.levels:
        ratios = paired_speedups(level, denominator.level(level.concurrency))
        if not ratios:
            cells.append("n/a")
            continue
        up = sum(r > 1.0 for r in ratios)
        above, trials = above + up, trials + len(ratios)
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        cells.append(f"{statistics.median(ratios):.2f} ({spread}), {up}/{len(ratios)}")
    pooled = f"{above}/{trials}, p {sign_test(above, trials):.3f}" if trials else "n/a"
    return [f"{numerator.label} / {denominator.label}", *cells, pooled]


def ratio_table(server: ServerRun, rows: list[list[str]]) -> str:
    levels = [f"c={lv.concurrency}" for lv in server.levels]
    return table(["tokens/s ratio", *levels, "above 1, all levels (sign test)"], rows)


def markdown(
    run: BenchRun, plots: list[str] = (), paired_with: str | None = None, against: str | None = None
) -> str:
    """The run's report; `paired_with`: a server to compare with each other one, repeat by repeat;
    `against`: a server (SGLang's built-in) each other one is compared with, repeat by repeat."""
    parts = [
        setup(run),
        "### Throughput, latency, acceptance\n\n" + throughput_table(run),
        "### Acceptance histogram (% of verify steps accepting k drafts; all levels pooled)\n\n"
        + histogram_table(run),
        "### Per-position acceptance (derived from the histogram; all levels pooled)\n\n"
        + position_table(run),
    ]
    if paired_with and run.repeats and run.repeats > 1:
        title = f"### {paired_with} against each server, paired by repeat (median (range), repeats above 1)"
        parts.insert(2, f"{title}\n\n" + paired_table(run, paired_with))
    if against and run.server(against) is not None and run.repeats and run.repeats > 1:
        title = f"### Each server against {against}, paired by repeat (median (range), repeats above 1)"
        parts.insert(2, f"{title}\n\n" + against_table(run, against))
    parts += [f"![{name}]({name})" for name in plots]
    return "\n\n".join(parts) + "\n"


def compare(new: BenchRun, old: BenchRun) -> str:
    """Throughput and accept length per server label and concurrency present in both runs."""
    rows = []
    for server in new.servers:
        before = old.server(server.label)
        for level in server.levels:
            prior = before.level(level.concurrency) if before else None
            if prior is None:
                continue
            change = (
                100 * (level.output_throughput / prior.output_throughput - 1)
                if prior.output_throughput
                else None
            )
            rows.append([
                server.label, str(level.concurrency),
                fmt(prior.output_throughput), fmt(level.output_throughput), fmt(change, 1, "%"),
                fmt(prior.acceptance.accept_length, 2), fmt(level.acceptance.accept_length, 2),
            ])  # fmt: skip
    if not rows:
        return "Nothing to compare: no server label and concurrency in both runs."
    header = ["server", "concurrency", "old tok/s", "new tok/s", "change", "old accept", "new accept"]
    return table(header, rows)
