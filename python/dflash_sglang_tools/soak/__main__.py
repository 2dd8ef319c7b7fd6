"""`make soak`: the full soak on a tiny pair, one server per configuration, one no-spec reference.

    python -m dflash_sglang_tools.soak --pair python/dflash_sglang/assets/tiny-pair --requests 1000

For each configuration (overlap worker, plain worker, the draft window, a tree of up to 32 nodes
with adaptive budgets on the given pair; the overlap worker with extra_buffer, as a chain and as a
16-node tree with adaptive budgets, on a tiny Qwen3.5-style hybrid pair written for the run, whose
mamba pool SGLang's strict idle check covers too) a DFLASH server with
SGLang's forced retractions and strict idle memory check runs the workload (workload.py) at the
given concurrency; then the checks of tests/server/test_soak.py: no failed request, every KV slot
free after a cache flush, no leak reported, every completed greedy request equal to the no-spec
server's output. Prints one JSON line per configuration and exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from transformers import AutoTokenizer

from dflash_sglang.environment import ADAPTIVE_WIDTH, CHECK_HOST_SYNC
from dflash_sglang_tools import EMBEDDED_PAIR

from ..testing.server import SGLangServer
from ..testing.tiny_dense import CORPUS
from ..testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair
from .run import kv_tokens_in_use_after_flush, run_workload, summary
from .workload import make_workload

STRICT = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "6",
          "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}  # fmt: skip
CONFIGS = {
    "overlap": ({"SGLANG_ENABLE_SPEC_V2": "1", CHECK_HOST_SYNC.name: "1"}, []),
    "plain": ({"SGLANG_ENABLE_SPEC_V2": ""}, []),
    "draft_window": ({"SGLANG_ENABLE_SPEC_V2": "1"}, ["--speculative-dflash-draft-window-size", "12"]),
    "hybrid": ({"SGLANG_ENABLE_SPEC_V2": "1"}, ["--mamba-scheduler-strategy", "extra_buffer",
                                               "--mamba-track-interval", "64"]),
    # Trees with adaptive budgets (up to N nodes a request, fewer under load: docs/adaptive.md).
    "tree": ({"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "1"},
             ["--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "32"]),
    "hybrid_tree": ({"SGLANG_ENABLE_SPEC_V2": "1", ADAPTIVE_WIDTH.name: "1"},
                    ["--mamba-scheduler-strategy", "extra_buffer", "--mamba-track-interval", "64",
                     "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16"]),
}  # fmt: skip
HYBRID = ("hybrid", "hybrid_tree")
# A hybrid target on CPU: float32 conv state for exact comparisons, a small state pool.
HYBRID_ENV = {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
HYBRID_ARGS = ["--max-mamba-cache-size", "64"]


def prompts_of(pair: Path) -> list[list[int]]:
    """The pair's held-out instructions, or lines of the tiny corpus for a pair written here."""
    tokenizer = AutoTokenizer.from_pretrained(pair / "target")
    held_out = pair / "held_out.jsonl"
    if held_out.is_file():
        texts = [
            json.loads(line)["instruction"] for line in held_out.read_text().splitlines() if line.strip()
        ]
    else:
        texts = [line for line in CORPUS.splitlines() if line.strip()]
    return [tokenizer(text)["input_ids"] for text in texts[:64]]


def reference(nospec, request) -> list[int]:
    return nospec.post("/generate", {k: v for k, v in request.body.items() if k != "rid"})["output_ids"]


def soak_one(name, pair, workload, nospec, concurrency, extra_env, extra_args) -> dict:
    env, args = CONFIGS[name]
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair / "draft", *args]
    with SGLangServer(pair / "target", [*extra_args, *dflash], env={**extra_env, **env, **STRICT}) as server:
        results = run_workload(server.base_url, workload, concurrency)
        in_use = kv_tokens_in_use_after_flush(server.base_url)
        log = server.log_path.read_text()
    greedy = [r for r in results if r.outcome == "completed" and r.request.greedy]
    differing = [r.request.rid for r in greedy if r.output_ids != reference(nospec, r.request)]
    report = {
        "config": name, **summary(results), "retractions": log.count("Testing retraction"),
        "kv_tokens_in_use_after_flush": in_use, "leaks_reported": log.count("memory leak detected"),
        "greedy_compared": len(greedy), "greedy_differing": len(differing),
    }  # fmt: skip
    report["ok"] = report["error"] == report["leaks_reported"] == in_use == len(differing) == 0
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", type=Path, default=EMBEDDED_PAIR)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.pair = args.pair.resolve()  # the servers run in their log directories
    dense = [name for name in args.configs if name not in HYBRID]
    ok = True
    with tempfile.TemporaryDirectory(prefix="soak-hybrid-") as scratch:
        runs = [(args.pair, dense, {}, [], [])]
        hybrid_names = [name for name in args.configs if name in HYBRID]
        if hybrid_names:
            hybrid = write_tiny_hybrid_pair(scratch, seed=0, block_size=8, shape=HybridShape(hot_tokens=3))
            no_buffer = ["--mamba-scheduler-strategy", "no_buffer"]
            runs.append((hybrid.target.parent, hybrid_names, HYBRID_ENV, HYBRID_ARGS, no_buffer))
        for pair, names, env, extra, nospec_extra in runs:
            if not names:
                continue
            workload = make_workload(prompts_of(pair), args.requests, seed=args.seed)
            nospec_args = [*extra, *nospec_extra, "--disable-overlap-schedule"]
            with SGLangServer(pair / "target", nospec_args, env=env) as nospec:
                for name in names:
                    report = soak_one(name, pair, workload, nospec, args.concurrency, env, extra)
                    print(json.dumps(report), flush=True)
                    ok &= report["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
