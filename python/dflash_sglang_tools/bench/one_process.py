"""`make bench-one-process`: verify policies compared inside one server process (docs/journal/adaptive.md).

    python -m dflash_sglang_tools.bench.one_process [--rounds 8] [--concurrency 16] [--load chat]

Why: on this CPU machine the same server, launched twice, ran the same width-8 step at batch 16
20-30% faster in one process than in the other, whatever the policy, and which was faster flipped
between launches. A comparison of fresh servers pairs one process of each, so a policy gap of
15-20% was not settled by eight pairs. Here one server switches its policy between bursts through
`/set_internal_state` (dflash_sglang/width/runtime_switch.py), so each comparison runs in one
process:
- `per request`: the adaptive width, each request its own length (a chain server's default);
- `one width a batch`: `dflash_request_lengths` 0 (a tree server's default);
- `fixed N` for each N of `--fixed` (default: the block): `dflash_verify_width` N, every step
  verifies N; the block is whole blocks. A tree server (`--topk K`, `--block` its N nodes) verifies
  its first N nodes, the fixed tree of N (best-first trees nest).
Each round sends one burst (every prompt, `--concurrency` in flight, radix cache flushed first)
under each policy, in the orders of a Williams design (`round_orders`: over its 6 rounds for three
policies, or 10 for five, each policy takes each place and follows each other equally often); one
warm-up burst under the server's default comes first (its estimates learn as they would in steady
state; the first burst is bench/first_burst.py's). `--servers` repeats it all on fresh processes.
`--without` leaves policies out (e.g. `"per request"` on a tree server, where it lost).
Reports the default's tokens/s over each other policy's in the same round: the median, the
geometric mean, the range and the rounds above 1 with a two-sided sign test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
from pathlib import Path

from dflash_sglang.environment import ADAPTIVE_WIDTH, REQUEST_LENGTHS

from ..testing.server import CPU_ARGS, SGLangServer
from .cli import concurrency_list
from .client import Sampling, run_level
from .level_stats import sign_test
from .prompts import load_prompts, take
from .server_info import describe, flush_cache, set_internal_state
from .tiny_prompts import EMBEDDED_PAIR


def policies(fixed_widths: list[int], trees: bool = False, without: tuple[str, ...] = ()) -> dict[str, dict]:
    """label: the runtime switches that make it (dflash_sglang/width/runtime_switch.py), the
    server's default first (per request on a chain, one budget a batch on a tree), `without` left out."""
    adaptive = {
        "per request": {"dflash_verify_width": 0, "dflash_request_lengths": 1},
        "one width a batch": {"dflash_verify_width": 0, "dflash_request_lengths": 0},
    }
    order = ["one width a batch", "per request"] if trees else ["per request", "one width a batch"]
    out = {label: adaptive[label] for label in order}
    for width in fixed_widths:
        out[f"fixed {width}"] = {"dflash_verify_width": width, "dflash_request_lengths": 1}
    unknown = set(without) - set(out)
    if unknown or len(out) - len(set(without)) < 2 or order[0] in without:
        raise ValueError(f"--without {sorted(without)}: leaves the default and one other of {list(out)}")
    return {label: switches for label, switches in out.items() if label not in without}


LOADS = {  # name: temperatures cycled over the requests (bench/mixed_load.py's loads)
    "chat": (0.0,),
    "mixed": (0.0, 1.0),
}


def round_orders(count: int) -> list[list[int]]:
    """A Williams design over `count` policies: in every order each policy takes each place once,
    and each follows every other equally often (a burst may run slower after some policy than
    after another: the rotation first used here put per request after whole blocks every time)."""
    base, low, high = [0], 1, count - 1
    for i in range(1, count):
        if i % 2:
            base, low = base + [low], low + 1
        else:
            base, high = base + [high], high - 1
    orders = [[(b + shift) % count for b in base] for shift in range(count)]
    return orders + [order[::-1] for order in orders] if count % 2 else orders


def round_order(labels: list[str], round_index: int) -> list[str]:
    """The policies' order in a round, from the design; its length many rounds balance it."""
    orders = round_orders(len(labels))
    return [labels[i] for i in orders[round_index % len(orders)]]


def summary(ratios: list[float]) -> dict:
    """Paired ratios (the default over another policy, one per round) -> what the tables show."""
    above = sum(r > 1 for r in ratios)
    below = sum(r < 1 for r in ratios)
    trials = above + below
    p = min(1.0, 2 * sign_test(max(above, below), trials)) if trials else 1.0
    return {
        "median": statistics.median(ratios),
        "geomean": math.exp(statistics.fmean(math.log(r) for r in ratios)),
        "low": min(ratios),
        "high": max(ratios),
        "above": above,
        "rounds": len(ratios),
        "sign_p": p,
    }


def burst(url: str, model: str, prompts, sampling: Sampling, concurrency: int, label: str) -> float:
    flush_cache(url)
    done, seconds = asyncio.run(run_level(url, model, prompts, sampling, concurrency, label))
    failed = [r.error for r in done if r.error]
    if failed:
        raise RuntimeError(f"{label}: {len(failed)} requests failed: {failed[0]}")
    return sum(r.completion_tokens for r in done) / seconds


def one_server(args, prompts, sampling: Sampling) -> dict[int, dict[str, list[float]]]:
    """A fresh server: per concurrency, each policy's tokens/s by round."""
    draft = str((args.pair / "draft").resolve())
    spec = [
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
        "--speculative-num-draft-tokens", str(args.block),
        *(["--speculative-eagle-topk", str(args.topk)] if args.topk > 1 else []),
    ]  # fmt: skip
    env = {"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "", REQUEST_LENGTHS.name: ""}
    out = {}
    with SGLangServer((args.pair / "target").resolve(), spec, env=env, base_args=CPU_ARGS) as server:
        url = server.base_url
        switches = policies(args.fixed or [args.block], args.topk > 1, tuple(args.without))
        labels = list(switches)
        model = describe(url, "one process").model
        for concurrency in args.concurrency:
            set_internal_state(url, switches[labels[0]])
            burst(url, model, prompts, sampling, concurrency, f"c={concurrency} warm-up")
            rates = {label: [] for label in labels}
            for k in range(args.rounds):
                for label in round_order(labels, k):
                    set_internal_state(url, switches[label])
                    rates[label].append(
                        burst(url, model, prompts, sampling, concurrency, f"c={concurrency} {k + 1} {label}")
                    )
            out[concurrency] = rates
    return out


def report(runs: list[dict[int, dict[str, list[float]]]], concurrency: list[int]) -> str:
    labels = list(runs[0][concurrency[0]])
    lines = [
        f"| concurrency | {labels[0]}, tokens/s | {labels[0]} over | median | geometric mean | range "
        "| rounds above 1 | sign test p |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in concurrency:
        base = [rate for run in runs for rate in run[c][labels[0]]]
        for other in labels[1:]:
            theirs = [rate for run in runs for rate in run[c][other]]
            s = summary([b / o for b, o in zip(base, theirs, strict=True)])
            lines.append(
                f"| {c} | {statistics.median(base):.0f} | {other} | {s['median']:.3f} "
                f"| {s['geomean']:.3f} | {s['low']:.2f}-{s['high']:.2f} | {s['above']}/{s['rounds']} "
                f"| {s['sign_p']:.3g} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.bench.one_process", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    p.add_argument("--block", type=int, default=8, help="the block, or a tree's N nodes")
    p.add_argument("--topk", type=int, default=0, help="a tree server's K (0: a chain)")
    p.add_argument("--fixed", type=concurrency_list, default=None, help="fixed widths (default: the block)")
    p.add_argument("--without", type=lambda text: text.split(","), default=[], help="labels, comma-separated")
    p.add_argument("--load", choices=sorted(LOADS), default="chat")
    p.add_argument("--concurrency", type=concurrency_list, default=[16])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--num-prompts", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--out", type=Path, default=Path("docs/bench/one-process.json"))
    args = p.parse_args(argv)
    temperatures = LOADS[args.load]
    sampling = Sampling(args.max_tokens, temperatures[0], temperatures=temperatures)
    prompts = take(load_prompts("tiny", pair_dir=args.pair), args.num_prompts)
    runs = [one_server(args, prompts, sampling) for _ in range(args.servers)]
    table = report(runs, args.concurrency)
    print(f"\n{args.load} load, {args.servers} server(s) x {args.rounds} rounds:\n{table}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = vars(args) | {"out": str(args.out), "pair": str(args.pair), "concurrency": args.concurrency}
    args.out.write_text(json.dumps({"args": settings, "runs": runs, "table": table}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
