"""`python -m dflash_sglang_tools.bench`: benchmark running servers, write tables, plots and JSON.

    python -m dflash_sglang_tools.bench --url http://127.0.0.1:30000 --baseline-url http://127.0.0.1:30001 \\
        --dataset gsm8k --num-prompts 128 --concurrency 1,8,16,32 --max-tokens 2048 --out bench-out

The servers are started by you (any SGLang server, speculative or not; other OpenAI-compatible
servers give throughput and latency without acceptance). The baseline is measured in the same run
with the same prompts, level by level right after the server under test.
"""

from __future__ import annotations

import argparse
import sys

from . import report, results
from .client import Sampling
from .prompts import NAMES, DatasetUnavailable, load_prompts, take
from .runner import bench_servers, new_run, write_outputs
from .server_info import ServerUnreachable, describe
from .tiny_prompts import describe as describe_tiny


def concurrency_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,8,16,32, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dflash_sglang_tools.bench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--url", default="http://127.0.0.1:30000", help="the server under test")
    p.add_argument("--label", default=None, help="its name in the tables (default: from the server)")
    p.add_argument("--baseline-url", default=None, help="a server without speculation, same target")
    p.add_argument("--baseline-label", default="baseline")
    p.add_argument(
        "--model", default=None, help="model name to send (default: the server's first /v1/models)"
    )
    p.add_argument("--dataset", default="tiny", choices=NAMES)
    p.add_argument("--data", default=None, help="JSONL/JSON prompts file; overrides --dataset")
    p.add_argument("--pair-dir", default=None, help="tiny pair whose held-out prompts --dataset tiny uses")
    p.add_argument("--num-prompts", type=int, default=128, help="prompts per concurrency level")
    p.add_argument("--concurrency", type=concurrency_list, default=[1, 8, 16, 32])
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--enable-thinking", action="store_true", help="chat_template_kwargs.enable_thinking")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured requests per server first")
    p.add_argument("--out", default="bench-out", help="directory for <name>.md, <name>.json, PNGs")
    p.add_argument("--name", default="bench", help="file name stem of the outputs")
    p.add_argument("--compare", default=None, help="an earlier <name>.json: print old vs new")
    return p


def dataset_label(args) -> str:
    if args.data:
        return args.data
    return f"tiny: {describe_tiny(args.pair_dir)}" if args.dataset == "tiny" else args.dataset


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        prompts = take(load_prompts(args.dataset, args.data, args.pair_dir), args.num_prompts)
        server = describe(args.url, args.label or "server", args.model)
        baseline = describe(args.baseline_url, args.baseline_label, args.model) if args.baseline_url else None
        old = results.load(args.compare) if args.compare else None
    except (DatasetUnavailable, ServerUnreachable, OSError, ValueError) as error:
        print(f"dflash_sglang_tools.bench: {error}", file=sys.stderr)
        return 2
    if server.algorithm and not args.label:
        server.label = f"{server.algorithm} b{server.block_size}"
    sampling = Sampling(args.max_tokens, args.temperature, args.enable_thinking)
    run = new_run(dataset_label(args), len(prompts), sampling, args.concurrency, baseline and baseline.label)
    print(f"{len(prompts)} prompts from {run.dataset}")
    servers = [server, baseline] if baseline else [server]
    run.servers = bench_servers(servers, prompts, sampling, args.concurrency, args.warmup)
    written = write_outputs(run, args.out, args.name)
    print(report.throughput_table(run))
    if old is not None:
        print("\nCompared with", args.compare)
        print(report.compare(run, old))
    print("\nwrote", ", ".join(str(path) for path in written.values()))
    return 0
