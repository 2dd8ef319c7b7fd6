"""`make bench`: the tiny pair on CPU, every way this project serves it, one server at a time.

    python -m dflash_sglang_tools.bench.suite --pair python/dflash_sglang/assets/tiny-pair --out docs/bench

Servers, each started, benchmarked at every concurrency and stopped before the next: no
speculation (the baseline), our worker with SGLANG_ENABLE_SPEC_V2=1 (the overlap worker) as
launched (the adaptive width, the default on CPU) and with whole blocks, our worker without it,
SGLang's built-in DFLASH worker (DFLASH_SGLANG_WORKER=builtin), and our worker at block sizes 4
and 16 (the pair's drafter is trained at 8: acceptance per block size). Writes
`tiny-cpu.{md,json}` and PNGs into --out, and the same tables between the `make bench` markers of
--docs (docs/benchmarks.md). Then the same at `--tp-size 2` (two ranks over gloo, one core each):
no speculation, our overlap worker (adaptive and whole blocks) and SGLang's built-in, into
`tiny-cpu-tp2.*` and the `make bench tp2` markers. Then trees (`--speculative-eagle-topk`)
against the chain and no speculation, fixed and with the adaptive width choosing tree budgets,
into `tiny-cpu-tree.*` and the `make bench tree` markers; trees on a random hybrid
(Qwen3.5-style) pair into `tiny-cpu-hybrid-tree.*` and the `make bench hybrid tree` markers; and
at temperature 0.6 and 1.0 point drafts, sampled drafts and sampled drafts verified as a block
against no speculation and the built-in, into `tiny-cpu-t0.6.*` / `tiny-cpu-t1.0.*`. A server
that fails to start is reported as such; the others run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.environment import ADAPTIVE_WIDTH, SAMPLED_DRAFTS, WORKER

from ..testing.server import CPU_ARGS, ServerError, SGLangServer
from ..testing.tiny_dense import TinyShape, write_tiny_pair
from . import hybrid_variants, report
from .cli import concurrency_list
from .client import Sampling
from .level_stats import merge_repeats
from .prompts import load_prompts, take
from .results import ServerRun
from .runner import bench_servers, new_run, write_outputs
from .server_info import describe
from .tiny_prompts import EMBEDDED_PAIR
from .tiny_prompts import describe as describe_tiny

RANDOM_PAIR = Path(".tiny")  # a random-weight stand-in while no trained pair exists


@dataclass
class Variant:
    label: str
    speculative: bool
    env: dict = field(default_factory=dict)
    notes: str = ""
    block: int | None = None  # --speculative-num-draft-tokens; None: the drafter's own block size
    args: tuple = ()  # further server arguments
    draft: str = "draft"  # the drafter's directory in the pair


VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant(
        "dflash_sglang spec-v2",
        True,
        {"SGLANG_ENABLE_SPEC_V2": "1"},
        "our worker, SGLANG_ENABLE_SPEC_V2=1 (the adaptive width, the default on CPU)",
    ),
    Variant(
        "dflash_sglang spec-v2 fixed",
        True,
        {"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "0"},
        "our worker, SGLANG_ENABLE_SPEC_V2=1, DFLASH_SGLANG_ADAPTIVE_WIDTH=0 (every step the whole block)",
    ),
    Variant("dflash_sglang", True, notes="our worker"),
    Variant("sglang built-in", True, {WORKER.name: "builtin"}, "DFLASH_SGLANG_WORKER=builtin"),
    Variant("dflash_sglang b4", True, notes="our worker, --speculative-num-draft-tokens 4", block=4),
    Variant("dflash_sglang b16", True, notes="our worker, --speculative-num-draft-tokens 16", block=16),
]

# Tensor parallelism on CPU: two ranks over gloo, one core each (docs/parallel.md).
TP2, ONE_CORE_PER_RANK = ("--tp-size", "2"), {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
TP2_VARIANTS = [
    Variant("no-spec tp2", False, ONE_CORE_PER_RANK, "plain decoding, --tp-size 2", args=TP2),
    Variant(
        "dflash_sglang spec-v2 tp2", True, {**ONE_CORE_PER_RANK, "SGLANG_ENABLE_SPEC_V2": "1"},
        "our worker, SGLANG_ENABLE_SPEC_V2=1, --tp-size 2 (the adaptive width, the default on CPU)", args=TP2,
    ),
    Variant(
        "dflash_sglang spec-v2 tp2 fixed", True,
        {**ONE_CORE_PER_RANK, "SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "0"},
        "our worker, SGLANG_ENABLE_SPEC_V2=1, DFLASH_SGLANG_ADAPTIVE_WIDTH=0, --tp-size 2", args=TP2,
    ),
    Variant(
        "sglang built-in tp2", True, {**ONE_CORE_PER_RANK, WORKER.name: "builtin"},
        "DFLASH_SGLANG_WORKER=builtin, --tp-size 2", args=TP2,
    ),
]  # fmt: skip

# Tree verification (docs/tree.md): the chain against trees of 2B, 4B and 8B nodes, overlap worker.
OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1"}


# The adaptive width is the default on CPU (width/controller.py): "fixed" servers turn it off,
# "adaptive" ones leave the switch unset, as a user launching the seed cards' commands would.
FIXED, DEFAULT = {ADAPTIVE_WIDTH.name: "0"}, {ADAPTIVE_WIDTH.name: ""}


def tree_variant(topk: int, width: int, adaptive: bool = False) -> Variant:
    notes = f"our worker, SGLANG_ENABLE_SPEC_V2=1, --speculative-eagle-topk {topk} "
    notes += f"--speculative-num-draft-tokens {width}"
    env = {**OVERLAP, **(DEFAULT if adaptive else FIXED)}
    notes += ", the adaptive width (the default; tree budgets as widths)" if adaptive else ", fixed (=0)"
    # N travels as the block: the suite passes it as --speculative-num-draft-tokens.
    args = ("--speculative-eagle-topk", str(topk))
    label = f"tree k{topk} n{width}" + (" adaptive" if adaptive else "")
    return Variant(label, True, env, notes, block=width, args=args)


TREE_VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("chain", True, {**OVERLAP, **FIXED}, "our worker, SGLANG_ENABLE_SPEC_V2=1 (whole blocks of 8)"),
    Variant("chain adaptive", True, {**OVERLAP, **DEFAULT},
            "our worker, SGLANG_ENABLE_SPEC_V2=1, block 8, the adaptive width (the default)"),
    tree_variant(4, 16),
    tree_variant(4, 16, adaptive=True),
    tree_variant(8, 32),
    tree_variant(8, 64),
    tree_variant(8, 64, adaptive=True),
]  # fmt: skip

# Trees on a hybrid (Gated DeltaNet) target: a random Qwen3.5-style pair written for the run (no
# trained hybrid pair ships), float32 conv state, extra_buffer, the overlap worker.
HYBRID_PAIR = Path(".tiny-hybrid")
HYBRID = {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
HYBRID_ARGS = ("--max-mamba-cache-size", "64", "--mamba-scheduler-strategy", "extra_buffer")


def hybrid(variant: Variant) -> Variant:
    notes = variant.notes + ", hybrid target"
    return Variant(variant.label, variant.speculative, {**HYBRID, **variant.env}, notes, variant.block,
                   (*HYBRID_ARGS, *variant.args))  # fmt: skip


HYBRID_TREE_VARIANTS = [hybrid(v) for v in TREE_VARIANTS if "n64" not in v.label or "adaptive" in v.label]

# Drafts at temperature > 0 (docs/sampled-drafts.md): point drafts, sampled drafts (the default)
# and sampled drafts verified as a block, against no speculation and the built-in; overlap worker.
POINT = {SAMPLED_DRAFTS.name: "0"}
SAMPLED_VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("point drafts", True, {**OVERLAP, **POINT},
            "our worker, SGLANG_ENABLE_SPEC_V2=1, DFLASH_SGLANG_SAMPLED_DRAFTS=0"),
    Variant("sampled drafts", True, OVERLAP,
            "our worker, SGLANG_ENABLE_SPEC_V2=1 (sampled drafts, the default)"),
    Variant("sampled drafts (no switches)", True, notes="our worker under SGLang's synchronous loop, as a "
            "server launched without the cards' SGLANG_ENABLE_SPEC_V2 runs it"),
    Variant("sampled drafts, block verification", True, OVERLAP,
            "our worker, SGLANG_ENABLE_SPEC_V2=1, --speculative-use-block-verification",
            args=("--speculative-use-block-verification",)),
    Variant("sglang built-in", True, {**OVERLAP, WORKER.name: "builtin"},
            "DFLASH_SGLANG_WORKER=builtin, SGLANG_ENABLE_SPEC_V2=1; on CPU it logs that non-greedy "
            "verification is unavailable and verifies greedily: not the target's law, not comparable"),
]  # fmt: skip
# The same drafts with whole blocks (the adaptive width off): tokens a step without the policy's
# choice of width in between.
WHOLE_BLOCK_SAMPLED_VARIANTS = [SAMPLED_VARIANTS[0]] + [
    Variant(f"{v.label}, whole blocks", True, {**v.env, **FIXED},
            f"{v.notes}, DFLASH_SGLANG_ADAPTIVE_WIDTH=0", args=v.args)
    for v in SAMPLED_VARIANTS
    if v.label in ("point drafts", "sampled drafts", "sampled drafts, block verification")
]  # fmt: skip

# DFlash2 at temperature > 0 (docs/sampled-drafts.md): the selector trained on the pair's drafter
# (`make tiny-dflash2`), its greedy walk against its sampled walk (the default), beside the plain
# drafter's sampled drafts; overlap worker, whole blocks, so tokens a step compare like for like.
DFLASH2 = "draft-dflash2"
DFLASH2_VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("DFlash, sampled drafts", True, {**OVERLAP, **FIXED},
            "our worker, the pair's DFlash drafter, SGLANG_ENABLE_SPEC_V2=1, DFLASH_SGLANG_ADAPTIVE_WIDTH=0"),
    Variant("DFlash2, greedy walk", True, {**OVERLAP, **FIXED, **POINT},
            f"our worker, {DFLASH2}, DFLASH_SGLANG_SAMPLED_DRAFTS=0, whole blocks", draft=DFLASH2),
    Variant("DFlash2, sampled walk", True, {**OVERLAP, **FIXED},
            f"our worker, {DFLASH2} (the sampled walk, the default), whole blocks", draft=DFLASH2),
    Variant("DFlash2, sampled walk, block verification", True, {**OVERLAP, **FIXED},
            f"our worker, {DFLASH2}, --speculative-use-block-verification, whole blocks", draft=DFLASH2,
            args=("--speculative-use-block-verification",)),
]  # fmt: skip

# A drafter that never fits (issue 64): the pair's drafter re-initialised at random, so its drafts
# rarely match the target's, at T 0.8 and block 16; "never slower than no speculation" is the bar.
NEVER_FITS_PAIR = Path(".never-fits")
NEVER_FITS_VARIANTS = [
    Variant("no-spec", False, notes="plain decoding (the baseline)"),
    Variant("ours (no switches)", True, notes="our worker (SGLang's synchronous loop), block 16, a drafter "
            "of random weights, the adaptive width (the default on CPU)", block=16),
    Variant("ours (SGLANG_ENABLE_SPEC_V2=1)", True, OVERLAP,
            "our overlap worker (the seed cards' flag), block 16, a drafter of random weights", block=16),
]  # fmt: skip

# Output name -> its variants (the first is the baseline) and its markers in docs/benchmarks.md.
RUNS = {"tiny-cpu": VARIANTS, "tiny-cpu-tp2": TP2_VARIANTS, "tiny-cpu-tree": TREE_VARIANTS,
        "tiny-cpu-hybrid-tree": HYBRID_TREE_VARIANTS, "tiny-cpu-hybrid": hybrid_variants.variants(Variant),
        "tiny-cpu-seed-hybrid": hybrid_variants.seed_variants(Variant),
        "tiny-cpu-t0.6": SAMPLED_VARIANTS, "tiny-cpu-t1.0": SAMPLED_VARIANTS,
        "tiny-cpu-t1.0-whole": WHOLE_BLOCK_SAMPLED_VARIANTS,
        "tiny-cpu-dflash2-t0.6": DFLASH2_VARIANTS, "tiny-cpu-dflash2-t1.0": DFLASH2_VARIANTS,
        "tiny-cpu-never-fits-t0.8": NEVER_FITS_VARIANTS}  # fmt: skip
TEMPERATURE = {"tiny-cpu-t0.6": 0.6, "tiny-cpu-t1.0": 1.0, "tiny-cpu-t1.0-whole": 1.0,
               "tiny-cpu-never-fits-t0.8": 0.8,
               "tiny-cpu-dflash2-t0.6": 0.6, "tiny-cpu-dflash2-t1.0": 1.0}  # fmt: skip
# (the other runs are greedy)
MARKERS = {
    "tiny-cpu": "make bench", "tiny-cpu-tp2": "make bench tp2", "tiny-cpu-tree": "make bench tree",
    "tiny-cpu-hybrid-tree": "make bench hybrid tree", "tiny-cpu-hybrid": "make bench hybrid",
    "tiny-cpu-seed-hybrid": "make bench seed hybrid",
    "tiny-cpu-t0.6": "make bench t0.6", "tiny-cpu-t1.0": "make bench t1.0",
    "tiny-cpu-t1.0-whole": "make bench t1.0 whole blocks",
    "tiny-cpu-dflash2-t0.6": "make bench dflash2 t0.6", "tiny-cpu-dflash2-t1.0": "make bench dflash2 t1.0",
    "tiny-cpu-never-fits-t0.8": "make bench never fits t0.8",
    "adaptive-cpu": "make bench adaptive", "adaptive-cpu-simulated": "make bench adaptive simulated",
}  # fmt: skip
SEED_OR_HYBRID = {"tiny-cpu-hybrid": hybrid_variants.HYBRID_PAIR_DIR,
                  "tiny-cpu-seed-hybrid": hybrid_variants.SEED_PAIR_DIR}  # fmt: skip


def hybrid_pair() -> Path:
    if not (HYBRID_PAIR / "draft" / "config.json").is_file():
        from ..testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

        write_tiny_hybrid_pair(HYBRID_PAIR, seed=0, block_size=8, shape=HybridShape(hot_tokens=3))
    return HYBRID_PAIR


def never_fitting_pair(pair: Path) -> Path:
    """`pair`'s target (linked) and its drafter's architecture with random weights (seed 0)."""
    if not (NEVER_FITS_PAIR / "draft" / "config.json").is_file():
        NEVER_FITS_PAIR.mkdir(exist_ok=True)
        for name in ("target", "held_out.jsonl"):
            if not (NEVER_FITS_PAIR / name).exists():
                (NEVER_FITS_PAIR / name).symlink_to((pair / name).resolve())
        torch.manual_seed(0)
        draft = DFlashDraftModel.from_pretrained(pair / "draft")
        for parameter in draft.parameters():
            torch.nn.init.normal_(parameter, std=0.05)
        draft.save_pretrained(NEVER_FITS_PAIR / "draft")
    return NEVER_FITS_PAIR


def resolve_pair(pair: Path) -> tuple[Path, str]:
    """The pair to benchmark and a line saying which; falls back to the random pair."""
    if (pair / "target" / "config.json").is_file() and (pair / "draft" / "config.json").is_file():
        return pair, f"pair {pair}"
    print(f"make bench: no trained tiny pair at {pair} (make tiny-pair writes it);\n"
          f"benchmarking the random-weight pair in {RANDOM_PAIR}/ instead: its acceptance is not a trained "
          f"drafter's.", file=sys.stderr)  # fmt: skip
    if not (RANDOM_PAIR / "draft" / "config.json").is_file():
        write_tiny_pair(RANDOM_PAIR, seed=0, block_size=16, shape=TinyShape(hot_tokens=3))
    return RANDOM_PAIR, f"random-weight pair {RANDOM_PAIR} (no trained pair at {pair})"


def serve_and_bench(variant: Variant, pair: Path, prompts, sampling, concurrencies) -> ServerRun:
    draft = pair / variant.draft
    block = variant.block or DFlashConfig.from_pretrained(draft).block_size
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft.resolve(),
            "--speculative-num-draft-tokens", block] if variant.speculative else []  # fmt: skip
    server = SGLangServer(
        (pair / "target").resolve(), [*variant.args, *args], env=variant.env, base_args=CPU_ARGS
    )
    try:
        with server:
            run = describe(server.base_url, variant.label, notes=variant.notes)
            return bench_servers([run], prompts, sampling, concurrencies)[0]
    except ServerError as error:
        print(f"make bench: {variant.label} did not start:\n{error}", file=sys.stderr)
        first = str(error).splitlines()[0]
        return ServerRun(
            variant.label, server.base_url, str(pair / "target"), notes=f"did not start ({first})"
        )


def serve_repeated(variants: list[Variant], pair: Path, prompts, sampling, concurrencies, repeats: int):
    """Every variant `repeats` times, fresh servers, interleaved (A B C A B C: a drift in the
    machine hits every server alike); each level merged over its repeats (stats.merge_repeats)."""
    rounds = [
        [serve_and_bench(v, pair, prompts, sampling, concurrencies) for v in variants] for _ in range(repeats)
    ]
    merged = []
    for runs in zip(*rounds, strict=True):
        first = runs[0]
        levels = [[run.level(c) for run in runs] for c in concurrencies]
        first.levels = [merge_repeats(level) for level in levels if all(level)]
        merged.append(first)
    return merged


def embed(docs: Path, markdown: str, marker: str = "make bench") -> bool:
    """Replace the text between the markers in docs; False where the markers are missing."""
    if not docs.is_file():
        return False
    begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
    text = docs.read_text()
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        return False
    docs.write_text(pattern.sub(lambda _: f"{begin}\n{markdown}\n{end}", text))
    return True


# Runs whose servers are each set against SGLang's built-in, repeat by repeat (report.against_table).
AGAINST_BUILTIN = {"tiny-cpu", "tiny-cpu-tp2"}


def report_run(run, name: str, out: Path, docs: Path, marker: str | None = None, paired_with=None) -> None:
    """The run's files in `out`, its section of `docs`; `paired_with`: a server compared with each
    other one repeat by repeat (report.paired_table)."""
    written = write_outputs(run, out, name)
    images = [os.path.relpath(path, docs.parent) for key, path in written.items() if key.endswith(".png")]
    marker = marker or MARKERS[name]
    against = "sglang built-in" if name in AGAINST_BUILTIN else None
    if embed(docs, report.markdown(run, images, paired_with, against), marker):
        print(f"updated the {marker} section of {docs}")
    print(report.throughput_table(run))
    print("\nwrote", ", ".join(str(path) for path in written.values()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.bench.suite", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    p.add_argument("--out", type=Path, default=Path("docs/bench"))
    p.add_argument("--docs", type=Path, default=Path("docs/benchmarks.md"))
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 4, 8])
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="fresh servers per variant, interleaved")
    p.add_argument("--only", default=None, help="comma-separated variant labels to run (default: all)")
    p.add_argument("--runs", default=None, help=f"comma-separated runs, of {', '.join(RUNS)} (default: all)")
    args = p.parse_args(argv)

    pair, pair_line = resolve_pair(args.pair)
    prompts = take(load_prompts("tiny", pair_dir=pair), args.num_prompts)
    only = set(args.only.split(",")) if args.only else None
    dataset = f"tiny: {describe_tiny(pair)}; {pair_line}"
    runs = args.runs.split(",") if args.runs else list(RUNS)
    for name in runs:
        variants = RUNS[name]
        variants = [v for v in variants if only is None or v.label in only]
        if variants:  # each run's baseline is its list's first entry, no speculation
            run_pair, run_prompts, run_dataset = pair, prompts, dataset
            if name == "tiny-cpu-hybrid-tree":
                run_pair = hybrid_pair()
                run_prompts = take(load_prompts("tiny", pair_dir=run_pair), args.num_prompts)
                run_dataset = f"tiny: random Qwen3.5-style hybrid pair {run_pair} (hot tokens 3, block 8)"
            if name == "tiny-cpu-never-fits-t0.8":
                run_pair = never_fitting_pair(pair)
                run_dataset = f"tiny: {describe_tiny(pair)}; its target, a drafter of random weights"
            if name in SEED_OR_HYBRID:
                run_pair = SEED_OR_HYBRID[name]
                run_prompts = take(load_prompts("tiny", pair_dir=run_pair), args.num_prompts)
                run_dataset = f"tiny: {describe_tiny(run_pair)}; the trained hybrid pair {run_pair.name}"
            sampling = Sampling(args.max_tokens, TEMPERATURE.get(name, 0.0))
            run = new_run(run_dataset, len(run_prompts), sampling, args.concurrency, RUNS[name][0].label)
            run.repeats = args.repeats
            run.servers = serve_repeated(
                variants, run_pair, run_prompts, sampling, args.concurrency, args.repeats
            )
            report_run(run, name, args.out, args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
