"""`make bench`'s runs on the trained tiny hybrid pair (assets/tiny-hybrid-pair: a Qwen3.5-style
target, Gated DeltaNet with full attention every fourth layer, and its DFlash drafter).

What the run answers (docs/hybrid.md): tokens/s at concurrency 1, 8 and 32 against no
speculation, for the verify through SGLang's ReplaySSM ring (`DFLASH_SGLANG_REPLAY_SSM=1`) against
a state per block position (`=0`), against whole blocks, SGLang's built-in worker (a state per
position: SGLang refuses it the ring on a GDN target), and a tree of 16 nodes with a state per
node against the same tree through the ring (tree/replay_ring.py). Float32 conv state (exact),
extra_buffer, 256 mamba slots: 51 running requests, so concurrency 32 is not capped by slots.
"""

from __future__ import annotations

from pathlib import Path

from dflash_sglang.environment import ADAPTIVE_WIDTH, REPLAY_SSM, REQUEST_LENGTHS, WORKER

ASSETS = Path(__file__).resolve().parents[2] / "dflash_sglang" / "assets"
HYBRID_PAIR_DIR = ASSETS / "tiny-hybrid-pair"
SEED_PAIR_DIR = ASSETS / "seed-hybrid-pair"
ENV = {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
ARGS = ("--max-mamba-cache-size", "256", "--mamba-scheduler-strategy", "extra_buffer")
OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1"}
RING = {**OVERLAP, REPLAY_SSM.name: "1"}
PER_POSITION = {**OVERLAP, REPLAY_SSM.name: "0"}
TREE = ("--speculative-eagle-topk", "4")
WHOLE = {ADAPTIVE_WIDTH.name: "0"}
ONE_WIDTH = {REQUEST_LENGTHS.name: "0"}


def variants(variant_class) -> list:
    """The run's servers (no speculation first), as the suite's Variant class."""

    def make(label, speculative, env, notes, block=None, args=()):
        return variant_class(label, speculative, {**ENV, **env}, notes, block, (*ARGS, *args))

    return [
        make("no-spec", False, {}, "plain decoding (the baseline)"),
        make("ring", True, RING, "our overlap worker, DFLASH_SGLANG_REPLAY_SSM=1 (the ring), adaptive"),
        make("ring one width a batch", True, {**RING, **ONE_WIDTH},
             "the same, DFLASH_SGLANG_REQUEST_LENGTHS=0"),
        make("ring whole blocks", True, {**RING, **WHOLE}, "the same, DFLASH_SGLANG_ADAPTIVE_WIDTH=0"),
        make("state per position", True, PER_POSITION,
             "our overlap worker, DFLASH_SGLANG_REPLAY_SSM=0 (a state per position)"),
        make("sglang built-in", True, {**OVERLAP, WORKER.name: "builtin"},
             "DFLASH_SGLANG_WORKER=builtin (a state per block position)"),
        make("ring b16", True, RING, "our overlap worker, the ring, block 16", 16),
        make("state per position b16", True, PER_POSITION,
             "our overlap worker, a state per position, block 16", 16),
        make("tree k4 n16", True, PER_POSITION, "our overlap worker, a tree of 16 nodes (a state per node)",
             16, TREE),
        make("tree ring k4 n16", True, RING, "the same tree through the ring (a record per node)", 16, TREE),
    ]  # fmt: skip


# `make serve`'s flags (launch/tiny-hybrid-cpu.sh): 64 mamba slots, SGLang's synchronous loop with the
# no_buffer radix cache; `make demo` starts its no-spec server with the same.
SERVE_ARGS = ("--max-mamba-cache-size", "64", "--mamba-radix-cache-strategy", "no_buffer",
              "--disable-overlap-schedule")  # fmt: skip
OVERLAP_ARGS = ("--max-mamba-cache-size", "64", "--mamba-scheduler-strategy", "extra_buffer")


def seed_variants(variant_class) -> list:
    """Issue 67's run on the seed-shaped pair (assets/seed-hybrid-pair, block 16): no speculation
    and ours as `make serve` launches them, then the same under the cards' SGLANG_ENABLE_SPEC_V2=1
    (the overlap schedule, extra_buffer), and SGLang's built-in under that flag."""

    def make(label, speculative, env, notes, args):
        return variant_class(label, speculative, {**ENV, **env}, notes, 16 if speculative else None, args)

    return [
        make("no-spec", False, {}, "plain decoding with make serve's flags (the baseline, as make demo)",
             SERVE_ARGS),
        make("ours (make serve)", True, {}, "our worker as make serve launches it: SGLang's synchronous "
             "loop, block 16, the defaults", SERVE_ARGS),
        make("no-spec, overlap schedule", False, {},
             "plain decoding, SGLang's overlap schedule, extra_buffer", OVERLAP_ARGS),
        make("ours (SGLANG_ENABLE_SPEC_V2=1)", True, OVERLAP, "our overlap worker, the cards' flag, "
             "extra_buffer, block 16", OVERLAP_ARGS),
        make("sglang built-in", True, {**OVERLAP, WORKER.name: "builtin"},
             "DFLASH_SGLANG_WORKER=builtin, SGLANG_ENABLE_SPEC_V2=1, extra_buffer, block 16", OVERLAP_ARGS),
    ]  # fmt: skip
