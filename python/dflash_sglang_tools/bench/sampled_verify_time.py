"""CPU time of one T > 0 verify step per path, and how often it calls the drafter's LM head.

    OMP_NUM_THREADS=1 python -m dflash_sglang_tools.bench.sampled_verify_time [--hidden 1024]

Engine-free: random float32 verify logits [bs * B, V], a random [V, H] float32 LM head for the
drafter's q, the cards' filter (T 0.6, top-k 20, top-p 0.95, SGLang's host bound max_top_k 20).
Paths: point drafts token by token (q one-hot, no proposal), sampled drafts token by token (the
default at T > 0), sampled drafts as a block (`--speculative-use-block-verification`), and the
draw itself (sampling/sampled_drafts.py). Median of `--repeats` runs after one warm-up; the LM-head
calls are those of one verify step (the draw's are its own column). Prints a markdown table
(docs/sampled-drafts.md, "q through the LM head once a step"). Timings, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept


def cards_filter(bs: int) -> SimpleNamespace:
    """The fields of SGLang's SamplingBatchInfo the verify reads: T 0.6, top-k 20, top-p 0.95."""
    return SimpleNamespace(
        temperatures=torch.full((bs, 1), 0.6),
        top_ks=torch.full((bs,), 20, dtype=torch.int32),
        top_ps=torch.full((bs,), 0.95),
        min_ps=torch.zeros(bs),
        need_top_k_sampling=True,
        need_top_p_sampling=True,
        need_min_p_sampling=False,
        max_top_k=20,
        is_all_greedy=False,
    )


class CountedHead:
    """The drafter's LM head [n, H] -> [n, V] float32, counting its calls (reads of the weight)."""

    def __init__(self, weight: torch.Tensor):
        self.weight, self.calls = weight, 0

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return (hidden.to(self.weight.dtype) @ self.weight.T).float()


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(bs: int, vocab: int, hidden: int, block: int, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    head = CountedHead(torch.randn(vocab, hidden, generator=g) / hidden**0.5)
    features = torch.randn(bs, block - 1, hidden, generator=g) * 3
    logits = torch.randn(bs * block, vocab, generator=g) * 3
    info = cards_filter(bs)
    drafts, proposal = draw_drafts(features, head, info, vocab, generator=g)
    point = logits.view(bs, block, vocab)[:, :-1].argmax(-1)
    row = {"draw": timed(lambda: draw_drafts(features, head, info, vocab, generator=g), repeats)}
    paths = {
        "point": lambda: sampled_accept(point, logits, info, block, generator=g),
        "sampled": lambda: sampled_accept(drafts, logits, info, block, generator=g, proposal=proposal),
        "block": lambda: sampled_accept(
            drafts, logits, info, block, generator=g, proposal=proposal, block_verification=True
        ),
    }
    for name, step in paths.items():
        head.calls = 0
        step()
        row[f"{name} calls"] = head.calls
        row[name] = timed(step, repeats)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[2048, 32768])
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), H {args.hidden}, block {args.block}"
    )
    calls = "LM-head calls: point / sampled / block"
    print(f"| V | bs | draw (ms) | point (ms) | sampled (ms) | block (ms) | {calls} |")
    print("|---|---|---|---|---|---|---|")
    for vocab in args.vocab:
        for bs in args.requests:
            r = measure(bs, vocab, args.hidden, args.block, args.repeats)
            calls = f"{r['point calls']} / {r['sampled calls']} / {r['block calls']}"
            print(
                f"| {vocab:,} | {bs} | {r['draw']:.2f} | {r['point']:.2f} | {r['sampled']:.2f} | "
                f"{r['block']:.2f} | {calls} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
