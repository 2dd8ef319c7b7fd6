"""The speedup bound and the markdown report: pure functions of the measured rows."""

from __future__ import annotations

from typing import Any

TAUS = tuple(range(1, 9))


def speedup_bound(tau: float, t_decode: float, t_verify: float, t_draft: float) -> float:
    """Tokens per step over the step's cost in decode steps: what DFlash gains at best when a step
    emits `tau` tokens on average and nothing but the drafter and the verify forward costs time."""
    return tau * t_decode / (t_verify + t_draft)


def draft_share(t_verify: float, t_draft: float) -> float:
    """The drafter's part of one speculative step."""
    return t_draft / (t_verify + t_draft)


def bound_rows(drafter: list[dict], target: list[dict], taus=TAUS) -> list[dict[str, Any]]:
    """One row per batch measured on both sides; graph replays where all three captured (what a
    serving engine runs), eager timings otherwise."""
    drafts = {row["batch"]: row for row in drafter}
    rows = []
    for t in target:
        d = drafts.get(t["batch"])
        if d is None:
            continue
        graphs = (t["decode_graph_ms"], t["verify_graph_ms"], d["graph_ms"])
        eager = (t["decode_eager_ms"], t["verify_eager_ms"], d["eager_ms"])
        timings, (decode, verify, draft) = ("eager", eager) if None in graphs else ("graph", graphs)
        rows.append({
            "batch": t["batch"], "timings": timings,
            "t_decode_ms": decode, "t_verify_ms": verify, "t_draft_ms": draft,
            "draft_share": draft_share(verify, draft),
            "bound": [speedup_bound(tau, decode, verify, draft) for tau in taus],
        })  # fmt: skip
    return rows


# ---- markdown ------------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-2 and value else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|")


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def graph_status(*statuses: str) -> str:
    return statuses[0] if len(set(statuses)) == 1 else "; ".join(statuses)


def render(report: dict[str, Any]) -> str:
    env, shapes = report["environment"], report["shapes"]
    return "\n".join([
        "# GPU check",
        "",
        f"**{env['device']}**, torch {env['torch']}, transformers {env['transformers']}, {env['dtype']}, "
        f"random weights. Context {shapes['context']} committed positions, block {shapes['block_size']}, "
        f"median of {shapes['iters']} timed calls after {shapes['warmup']} warmup (ms).",
        "",
        "## Drafter: DFlashDraftModel, one draft step",
        "",
        "Embed the block, inject the new context as K/V, the drafter's layers, LM head, argmax. "
        "`rel. err vs forward`: the static-buffer step against `DFlashDraftModel.forward`.",
        "",
        drafter_table(report["drafter"]),
        "",
        "## Verify-side math: dflash_sglang.sampling.distribution / accept",
        "",
        acceptance_table(report["acceptance"]),
        "",
        "## Target: transformers Qwen3, StaticCache, SDPA",
        "",
        target_table(report["target"]),
        "",
        "## Speedup bound: tau * T_decode / (T_verify + T_draft)",
        "",
        "tau: tokens a step emits on average (accepted drafts + 1). The bound ignores everything "
        "but the two forwards, so a server reaches less.",
        "",
        bound_table(report["bound"], report["taus"]),
        "",
    ])  # fmt: skip


def drafter_table(rows: list[dict]) -> str:
    header = ["batch", "eager ms", "graph ms", "graph", "replay == eager", "max diff", "rel. err vs forward"]
    keys = ["batch", "eager_ms", "graph_ms", "graph", "replay_equal", "replay_max_diff", "ref_rel_err"]
    return table(header, [[r[k] for k in keys] for r in rows])


def acceptance_table(rows: list[dict]) -> str:
    header = ["step", "requests x block x vocab", "eager ms", "graph ms", "graph", "eager output"]
    keys = ["name", "shape", "eager_ms", "graph_ms", "graph", "eager_check", "replay_check"]
    return table(header + ["replay output"], [[r[k] for k in keys] for r in rows])


def target_table(rows: list[dict]) -> str:
    header = ["batch", "decode eager ms", "decode graph ms", "verify eager ms", "verify graph ms"]
    keys = ["batch", "decode_eager_ms", "decode_graph_ms", "verify_eager_ms", "verify_graph_ms"]
    cells = []
    for r in rows:
        graph = graph_status(r["decode_graph"], r["verify_graph"])
        equal = _both(r["decode_replay"], r["verify_replay"])
        cells.append([r[k] for k in keys] + [graph, equal])
    return table(header + ["graph", "replay vs eager"], cells)


def bound_table(rows: list[dict], taus) -> str:
    header = ["batch", "timings", "T_decode", "T_verify", "T_draft", "draft share"]
    header += [f"tau={t}" for t in taus]
    keys = ["batch", "timings", "t_decode_ms", "t_verify_ms", "t_draft_ms"]
    cells = [
        [r[k] for k in keys] + [f"{100 * r['draft_share']:.1f}%"] + [f"{b:.2f}x" for b in r["bound"]]
        for r in rows
    ]
    return table(header, cells)


def _both(decode: str | None, verify: str | None) -> str | None:
    return decode if decode == verify else f"decode {fmt(decode)}, verify {fmt(verify)}"
