"""`make bench-mixed`: per-request verify lengths against one width a batch (docs/adaptive.md).

    python -m dflash_sglang_tools.bench.mixed_load [--repeats 3] [--concurrency 1,4,8,16,32]

Two loads on the embedded tiny pair (block 8), each through four servers started fresh, one at a
time and interleaved (A B C D A B C D ...; `--sleep-on-idle`, CPU_ARGS), at every concurrency:
- `chat`: the pair's held-out chat requests, greedy: drafts fit (about 4 tokens a step);
- `mixed`: the same requests, every other one at temperature 1.0, where the pair's drafts rarely
  fit (about 1.4 tokens a step against about 4 greedy): one batch mixes requests whose drafts fit
  and requests whose drafts do not, the case one width a batch serves badly.
The servers: no-spec; whole blocks (`DFLASH_SGLANG_ADAPTIVE_WIDTH=0`); the adaptive width with one
width a batch (`DFLASH_SGLANG_REQUEST_LENGTHS=0`); the default, per-request lengths. Each level is
the median over the repeats with its range (level_stats.merge_repeats); the tables land between
the `make bench mixed` / `make bench chat lengths` markers of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dflash_sglang.environment import ADAPTIVE_WIDTH, REQUEST_LENGTHS

from .cli import concurrency_list
from .client import Sampling
from .prompts import load_prompts, take
from .runner import new_run
from .suite import OVERLAP, Variant, report_run, serve_repeated
from .tiny_prompts import EMBEDDED_PAIR
from .tiny_prompts import describe as describe_tiny

VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("whole blocks", True, {**OVERLAP, ADAPTIVE_WIDTH.name: "0"},
            "our overlap worker, DFLASH_SGLANG_ADAPTIVE_WIDTH=0 (every step the whole block of 8)"),
    Variant("adaptive, one width a batch", True,
            {**OVERLAP, ADAPTIVE_WIDTH.name: "", REQUEST_LENGTHS.name: "0"},
            "our overlap worker, the adaptive width, DFLASH_SGLANG_REQUEST_LENGTHS=0"),
    Variant("adaptive, per request (default)", True,
            {**OVERLAP, ADAPTIVE_WIDTH.name: "", REQUEST_LENGTHS.name: ""},
            "our overlap worker as launched: the adaptive width, each request its own length"),
]  # fmt: skip
LOADS = {  # name: (temperatures cycled over the requests, the docs' marker)
    "tiny-cpu-chat-lengths": ((0.0,), "make bench chat lengths"),
    "tiny-cpu-mixed": ((0.0, 1.0), "make bench mixed"),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.bench.mixed_load", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    p.add_argument("--docs", type=Path, default=Path("docs/benchmarks.md"))
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 4, 8, 16, 32])
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loads", default=",".join(LOADS))
    args = p.parse_args(argv)
    prompts = take(load_prompts("tiny", pair_dir=args.pair), args.num_prompts)
    for name in args.loads.split(","):
        temperatures, marker = LOADS[name]
        sampling = Sampling(args.max_tokens, temperatures[0], temperatures=temperatures)
        mix = " / ".join(f"{t:g}" for t in temperatures)
        dataset = f"tiny: {describe_tiny(args.pair)}; requests alternate temperatures {mix}"
        run = new_run(dataset, len(prompts), sampling, args.concurrency, VARIANTS[0].label)
        run.repeats = args.repeats
        run.servers = serve_repeated(VARIANTS, args.pair, prompts, sampling, args.concurrency, args.repeats)
        report_run(run, name, args.out, args.docs, marker, paired_with=VARIANTS[-1].label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
