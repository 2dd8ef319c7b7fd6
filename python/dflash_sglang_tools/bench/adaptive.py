"""The adaptive verify width under load, on CPU (docs/adaptive.md):

    python -m dflash_sglang_tools.bench.adaptive [--simulate-acceptance 0.9,0.85,0.8]

A random target of real layer shapes (hidden 1024, 8 layers, ~100M parameters: a 32 x 16-token
verify costs several times a 32-token decode here) with a random drafter, so drafts are hardly
ever accepted: the worst case of speculation, where a fixed block pays B tokens of verify per
committed token. With --simulate-acceptance the speculative servers accept drafts at those
per-position rates instead (DFLASH_SGLANG_SIMULATE_ACCEPTANCE, benchmarking only: the output is
not the target's), a trained drafter's profile on a target of real shapes. Servers, one at a
time, same prompts and levels: no speculation, our worker at a fixed block of 16, our worker with
the adaptive width (the default on CPU). Writes `adaptive-cpu[-simulated].{md,json}`
and plots into --out and the tables between the `make bench adaptive[ simulated]` markers of
--docs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dflash_sglang.environment import ADAPTIVE_WIDTH, SIMULATE_ACCEPTANCE

from ..testing.tiny_dense import TinyShape, write_tiny_pair
from .cli import concurrency_list
from .client import Sampling
from .prompts import load_prompts, take
from .runner import new_run
from .suite import Variant, report_run, serve_repeated
from .tiny_prompts import EMBEDDED_PAIR

BLOCK = 16
SHAPE = TinyShape(hidden_size=1024, target_layers=8, draft_layers=1, heads=16, kv_heads=4, head_dim=64,
                  intermediate_size=2816)  # fmt: skip

VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("fixed block 16", True, {"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "0"},
            "our overlap worker, block 16, DFLASH_SGLANG_ADAPTIVE_WIDTH=0",
            block=BLOCK),
    Variant(
        "adaptive", True, {"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: ""},
        "our overlap worker, block 16, the adaptive width (the default on CPU)", block=BLOCK,
    ),
]  # fmt: skip


def variants(profile: str | None) -> list[Variant]:
    if profile is None:
        return VARIANTS
    switch = SIMULATE_ACCEPTANCE.name
    return [VARIANTS[0]] + [
        Variant(v.label, True, {**v.env, switch: profile}, f"{v.notes}, {switch}={profile}", block=BLOCK)
        for v in VARIANTS[1:]
    ]


def main(argv=None) -> int:
    summary = __doc__.split("\n\n")[0]
    p = argparse.ArgumentParser(prog="python -m dflash_sglang_tools.bench.adaptive", description=summary)
    p.add_argument("--pair", type=Path, default=Path(".bench-adaptive-pair"), help="written if missing")
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    p.add_argument("--docs", type=Path, default=Path("docs/benchmarks.md"))
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 4, 8, 16, 32])
    p.add_argument(
        "--simulate-acceptance",
        default=None,
        metavar="RATES",
        help="per-position acceptance rates for the speculative servers (benchmarking only)",
    )
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3, help="fresh servers per variant, interleaved")
    args = p.parse_args(argv)
    if not (args.pair / "draft" / "config.json").is_file():
        write_tiny_pair(args.pair, seed=0, block_size=BLOCK, shape=SHAPE)
    prompts = take(load_prompts("tiny", pair_dir=EMBEDDED_PAIR), args.num_prompts)
    sampling = Sampling(args.max_tokens)
    profile = args.simulate_acceptance
    drafter = "random 1-layer drafter" if profile is None else f"acceptance simulated at rates {profile}"
    # A bad profile fails here, naming the switch, rather than in every server.
    if profile is not None and not SIMULATE_ACCEPTANCE.parse(profile):
        p.error("--simulate-acceptance: at least one rate")
    dataset = f"random target, hidden 1024 x 8 layers, {drafter} (block {BLOCK}); tiny prompts"
    run = new_run(dataset, len(prompts), sampling, args.concurrency, "no-spec")
    run.repeats = args.repeats
    run.servers = serve_repeated(
        variants(profile), args.pair, prompts, sampling, args.concurrency, args.repeats
    )
    report_run(run, "adaptive-cpu" if profile is None else "adaptive-cpu-simulated", args.out, args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
