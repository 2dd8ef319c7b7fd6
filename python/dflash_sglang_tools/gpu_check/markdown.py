"""The speedup bound and the markdown report: pure functions of the measured rows."""

from __future__ import annotations

from typing import Any

from .t_positive import PATHS

TAUS = tuple(range(1, 9))


def speedup_bound(tau: float, t_decode: float, t_verify: float, t_draft: float, t_math: float = 0.0) -> float:
    """Tokens per step over the step's cost in decode steps: what DFlash gains at best when a step
    emits `tau` tokens on average and nothing but the drafter, the verify forward and (T > 0) the
    verify math costs time."""
    return tau * t_decode / (t_verify + t_draft + t_math)


def draft_share(t_verify: float, t_draft: float, t_math: float = 0.0) -> float:
    """The drafter's part of one speculative step."""
    return t_draft / (t_verify + t_draft + t_math)


def t_positive_math_ms(row: dict[str, Any]) -> float:
    """What a T > 0 step adds to the forwards (a t_positive row): drawing the drafts, less the
    LM-head product T_draft already holds (its argmax step runs the same product), plus judging
    them token by token (sampled_accept with the proposal, the default at T > 0). The plain
    decode's own sampler (one [bs, V] row a request) is not added to T_decode: the bound is, if
    anything, low."""
    p = row["paths"]
    return max(0.0, p["draw"]["ms"] - p["draft_lm_head"]["ms"]) + p["sampled"]["ms"]


def bound_rows(
    drafter: list[dict], target: list[dict], taus=TAUS, t_positive: list[dict] | None = None, vocab: int = 0
) -> list[dict[str, Any]]:
    """One row per batch measured on both sides; graph replays where all three captured (what a
    serving engine runs), eager timings otherwise. With `t_positive` (the T > 0 table's rows), the
    T > 0 rows: the same forwards plus the eager verify math at the cards' filter, at `vocab` (the
    target's), for the batches that table measured."""
    drafts = {row["batch"]: row for row in drafter}
    math = {}
    if t_positive is not None:
        math = {
            r["batch"]: t_positive_math_ms(r)
            for r in t_positive
            if r["filter"] == "cards" and r["vocab"] == vocab
        }
    rows = []
    for t in target:
        d = drafts.get(t["batch"])
        if d is None or (t_positive is not None and t["batch"] not in math):
            continue
        graphs = (t["decode_graph_ms"], t["verify_graph_ms"], d["graph_ms"])
        eager = (t["decode_eager_ms"], t["verify_eager_ms"], d["eager_ms"])
        timings, (decode, verify, draft) = ("eager", eager) if None in graphs else ("graph", graphs)
        extra = math.get(t["batch"], 0.0)
        rows.append({
            "batch": t["batch"], "timings": timings,
            "math": "T = 0" if t_positive is None else "T > 0",
            "t_decode_ms": decode, "t_verify_ms": verify, "t_draft_ms": draft,
            "t_math_ms": None if t_positive is None else extra,
            "draft_share": draft_share(verify, draft, extra),
            "bound": [speedup_bound(tau, decode, verify, draft, extra) for tau in taus],
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
        "## T > 0 verify math: dflash_sglang.sampling (eager)",
        "",
        "Block 16, float32 verify logits. `cards`: T 0.6, top-k 20, top-p 0.95 (max_top_k 20); "
        "`top_p only`: T 0.6, top-p 0.95, no top-k (every row sorted). Each cell: ms (x the memory "
        "floor, one read of the [bs x 16, V] logits). `law`: target_law.row_laws alone; `point`: "
        "sampled_accept of argmax drafts; `draw`: draw_drafts (its LM head included); `sampled` / "
        "`block`: sampled_accept of the drawn drafts, token-wise / block verification; `tree "
        "draw`: target_law.draw_every_row over 16 nodes; `tree build`: build_batch_trees, budget 15, "
        "8 children.",
        "",
        t_positive_table(report["t_positive"]),
        "",
        "Peak extra memory of one call (MiB, torch.cuda.max_memory_allocated over what was live):",
        "",
        t_positive_memory_table(report["t_positive"]),
        "",
        "## Speedup bound: tau * T_decode / (T_verify + T_draft [+ T>0 math])",
        "",
        "tau: tokens a step emits on average (accepted drafts + 1). The bound ignores everything "
        "but the two forwards (and, in the T > 0 rows, the verify math of the T > 0 table at the "
        "cards' filter: draw - draft LM head + sampled), so a server reaches less.",
        "",
        bound_table(report["bound"] + report.get("bound_t_positive", []), report["taus"]),
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
    header = ["batch", "timings", "math", "T_decode", "T_verify", "T_draft", "T>0 math", "draft share"]
    header += [f"tau={t}" for t in taus]
    keys = ["batch", "timings", "math", "t_decode_ms", "t_verify_ms", "t_draft_ms", "t_math_ms"]
    cells = [
        [r.get(k) for k in keys] + [f"{100 * r['draft_share']:.1f}%"] + [f"{b:.2f}x" for b in r["bound"]]
        for r in rows
    ]
    return table(header, cells)


def t_positive_table(rows: list[dict]) -> str:
    header = ["filter", "V", "bs"] + [title for _, title in PATHS] + ["outputs", "law: Triton vs torch"]
    cells = []
    for r in rows:
        timed = [_times(r["paths"][key], key == "floor") for key, _ in PATHS]
        cells.append([r["filter"], r["vocab"], r["batch"], *timed, r["outputs"], r["law_max_diff"]])
    return table(header, cells)


def t_positive_memory_table(rows: list[dict]) -> str:
    header = ["filter", "V", "bs"] + [title for _, title in PATHS]
    cells = []
    for r in rows:
        mib = [r["paths"][key]["extra_mib"] for key, _ in PATHS]
        cells.append([r["filter"], r["vocab"], r["batch"], *(NA if m is None else f"{m:.0f}" for m in mib)])
    return table(header, cells)


NA = "n/a"


def _times(t: dict, floor: bool) -> str:
    if t["ms"] is None:
        return t.get("note", NA)
    return fmt(t["ms"]) if floor else f"{fmt(t['ms'])} ({t['x_floor']:.0f}x)"


def _both(decode: str | None, verify: str | None) -> str | None:
    return decode if decode == verify else f"decode {fmt(decode)}, verify {fmt(verify)}"
