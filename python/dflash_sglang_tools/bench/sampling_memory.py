"""Peak memory and time of one sampled verify step, dense (before) vs sampled_verify (after).

    python -m dflash_sglang_tools.bench.sampling_memory [--requests 48 --block 16 --vocab 151936]

Random float32 logits [requests * block, vocab]; each (case, path) runs in a fresh interpreter,
so its peak RSS above the inputs (ru_maxrss delta) is that step's own memory. The first step is
the measured one; the time is that of a second step. Prints a markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from types import SimpleNamespace

import torch

from dflash_sglang.sampling.accept import rejection_accept
from dflash_sglang.sampling.distribution import target_distribution

TOP_K_ALL = 1 << 30
CASES = {  # name -> per request (temperature, top_k, top_p, min_p), for request index i
    "temperature 0.7": lambda i: (0.7, TOP_K_ALL, 1.0, 0.0),
    "top_k 50": lambda i: (0.7, 50, 1.0, 0.0),
    "top_k 50 + top_p 0.9": lambda i: (0.7, 50, 0.9, 0.0),
    "top_p 0.9": lambda i: (0.7, TOP_K_ALL, 0.9, 0.0),
    "min_p 0.05": lambda i: (0.7, TOP_K_ALL, 1.0, 0.05),
    "half greedy, half T=0.7": lambda i: (1.0, 1, 1.0, 0.0) if i % 2 else (0.7, TOP_K_ALL, 1.0, 0.0),
}


def batch(case: str, requests: int):
    params = [CASES[case](i) for i in range(requests)]
    t, k, p, m = (list(c) for c in zip(*params, strict=True))
    info = SimpleNamespace(
        temperatures=torch.tensor(t).view(-1, 1),
        top_ks=torch.tensor(k, dtype=torch.int32),
        top_ps=torch.tensor(p),
        min_ps=torch.tensor(m),
        is_all_greedy=False,
        need_top_k_sampling=any(x != TOP_K_ALL for x in k),
        need_top_p_sampling=any(x != 1.0 for x in p),
        need_min_p_sampling=any(x > 0 for x in m),
        max_top_k=max(k) if max(k) < TOP_K_ALL else None,
    )
    reqs = [
        SimpleNamespace(sampling_params=SimpleNamespace(top_k=a, top_p=b)) for a, b in zip(k, p, strict=True)
    ]
    return info, reqs


def measure_one(case: str, path: str, requests: int, block: int, vocab: int) -> dict:
    """In this (fresh) process: peak RSS growth of one step, then the time of another."""
    if path == "dense":  # the path before sampled_verify: still the oracle's (drafter/reference.py)

        def step(drafts, logits, info, block, reqs=None):
            return rejection_accept(drafts, target_distribution(logits, info, block))

    else:
        from dflash_sglang.sampling.sampled_verify import sampled_accept as step
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(requests * block, vocab, generator=g)
    drafts = logits.view(requests, block, vocab)[:, :-1].argmax(-1)  # point proposals
    info, reqs = batch(case, requests)
    small = torch.randn(block, 64, generator=g)  # load code and kernels outside the measurement
    step(
        small[:-1, :1].argmax(-1).view(1, -1)[:, : block - 1], small, batch(case, 1)[0], block, reqs=reqs[:1]
    )
    torch.manual_seed(0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step(drafts, logits, info, block, reqs=reqs)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    start = time.perf_counter()
    step(drafts, logits, info, block, reqs=reqs)
    return {"peak_mib": peak_kib / 1024, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--one", nargs=2, metavar=("CASE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = (args.requests, args.block, args.vocab)
    if args.one:
        print(json.dumps(measure_one(*args.one, *sizes)))
        return
    rows = args.requests * args.block
    logits_mib = rows * args.vocab * 4 / 2**20
    print(f"{args.requests} requests x block {args.block} = {rows} rows, vocab {args.vocab}, ", end="")
    print(f"float32 logits {logits_mib:.0f} MiB, {torch.get_num_threads()} threads\n")
    print("| case | dense peak MiB | ours peak MiB | dense s | ours s |")
    print("|---|---|---|---|---|")
    for case in args.cases:
        got = {}
        for path in ("dense", "ours"):
            command = [sys.executable, "-m", __spec__.name, "--one", case, path]
            command += [
                "--requests",
                str(args.requests),
                "--block",
                str(args.block),
                "--vocab",
                str(args.vocab),
            ]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            got[path] = json.loads(out.strip().splitlines()[-1])
        d, o = got["dense"], got["ours"]
        memory, seconds = (
            f"{d['peak_mib']:.0f} | {o['peak_mib']:.0f}",
            f"{d['seconds']:.2f} | {o['seconds']:.2f}",
        )
        print(f"| {case} | {memory} | {seconds} |")


if __name__ == "__main__":
    main()
