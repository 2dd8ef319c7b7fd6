"""What a new server's first users pay while the adaptive width learns (docs/journal/adaptive.md):

    python -m dflash_sglang_tools.bench.first_burst [--repeats 3]

Every repeat starts fresh servers (a first burst is a new server's), one at a time and
interleaved (no-spec, DFlash, DFlash with whole blocks, no-spec, ...; all under
`--sleep-on-idle`), and sends each
`--bursts` bursts of the same requests (radix cache flushed between them), `--concurrency` in
flight. Two pairs:
- drafts that rarely fit: a random pair at block 16 (`.tiny`, the suite's random pair; its hot
  tokens make some drafts fit);
- a good drafter: the embedded trained pair at its block (8).
Reports tokens/s per burst (median and range over the repeats), DFlash over no-spec per repeat
(paired: the same repeat's servers), and for DFlash its first burst over its last (the steady
state). The whole-block server (`DFLASH_SGLANG_ADAPTIVE_WIDTH=0`) has no policy to learn: what
its first burst loses against its last is the warm-up every DFlash server pays, apart from the
adaptive width's. The bars (issue 40): drafts that do not fit at or above 0.9x no-spec from the first
burst; a good drafter's first burst within 5% of its steady state.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from dflash_sglang.environment import ADAPTIVE_WIDTH

from ..testing.server import CPU_ARGS, SGLangServer
from ..testing.tiny_dense import TinyShape, write_tiny_pair
from .client import Sampling, run_level
from .prompts import load_prompts, take
from .server_info import describe, flush_cache
from .suite import RANDOM_PAIR
from .tiny_prompts import EMBEDDED_PAIR

BURSTS = 4


def pairs() -> dict[str, tuple[Path, int]]:
    if not (RANDOM_PAIR / "draft" / "config.json").is_file():
        write_tiny_pair(RANDOM_PAIR, seed=0, block_size=16, shape=TinyShape(hot_tokens=3))
    return {
        "rarely fits (random pair, block 16)": (RANDOM_PAIR, 16),
        "good (trained pair, block 8)": (EMBEDDED_PAIR, 8),
    }


# The servers of a repeat, in order: (label, DFLASH_SGLANG_ADAPTIVE_WIDTH or None for no-spec).
SERVERS = (("no-spec", None), ("dflash", ""), ("whole blocks", "0"))


def bursts(
    pair: Path, block: int, adaptive: str | None, prompts, sampling: Sampling, concurrency: int, count: int
) -> list[float]:
    """A fresh server's tokens/s over `count` bursts of the prompts (adaptive None: no-spec; "":
    the default width; "0": whole blocks)."""
    draft = str((pair / "draft").resolve())
    args = [] if adaptive is None else [
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
        "--speculative-num-draft-tokens", str(block),
    ]  # fmt: skip
    env = {"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: adaptive or ""}
    out = []
    with SGLangServer((pair / "target").resolve(), args, env=env, base_args=CPU_ARGS) as server:
        model = describe(server.base_url, "first burst").model
        for k in range(count):
            flush_cache(server.base_url)
            label = f"{'no-spec' if adaptive is None else 'dflash ' + (adaptive or 'default')} burst {k + 1}"
            done, seconds = asyncio.run(
                run_level(server.base_url, model, prompts, sampling, concurrency, label)
            )
            failed = [r.error for r in done if r.error]
            if failed:
                raise RuntimeError(f"{label}: {len(failed)} requests failed: {failed[0]}")
            out.append(sum(r.completion_tokens for r in done) / seconds)
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.bench.first_burst", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--num-prompts", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--bursts", type=int, default=BURSTS)
    p.add_argument("--temperature", type=float, default=0.0, help="every request's (issue 64: 1.0)")
    p.add_argument("--only", default=None, help="the pairs whose label starts so (e.g. 'rarely')")
    p.add_argument("--out", type=Path, default=Path("docs/bench/first-burst.json"))
    args = p.parse_args(argv)
    sampling = Sampling(args.max_tokens, args.temperature)
    results = {}
    chosen = {k: v for k, v in pairs().items() if args.only is None or k.startswith(args.only)}
    for name, (pair, block) in chosen.items():
        prompts = take(load_prompts("tiny", pair_dir=pair), args.num_prompts)
        runs = {label: [] for label, _ in SERVERS}
        for _ in range(args.repeats):  # A B C A B C: a drift in the machine hits all alike
            for label, adaptive in SERVERS:
                runs[label].append(
                    bursts(pair, block, adaptive, prompts, sampling, args.concurrency, args.bursts)
                )
        results[name] = runs
        print(f"\n{name}: tokens/s by burst, median (range) of {args.repeats} fresh servers each")
        for label, rows in runs.items():
            print(f"  {label:8s}", "  ".join(spread([row[k] for row in rows]) for k in range(args.bursts)))
        for label in ("dflash", "whole blocks"):
            ratios = [
                [d / n for d, n in zip(dr, nr, strict=True)]
                for dr, nr in zip(runs[label], runs["no-spec"], strict=True)
            ]
            print(
                f"  {label} / no-spec",
                "  ".join(spread([row[k] for row in ratios]) for k in range(args.bursts)),
            )
        for label in runs:
            print(f"  {label} first burst / its last: {spread([row[0] / row[-1] for row in runs[label]])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "results": results}, indent=1)
    )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
