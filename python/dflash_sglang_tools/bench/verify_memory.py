"""Peak extra memory of the T > 0 verify's chunked passes, measured on CPU by torch's profiler.

    OMP_NUM_THREADS=1 python -m dflash_sglang_tools.bench.verify_memory [--requests 64 --vocab 248320]

CPU has no max_memory_allocated, but torch.profiler(profile_memory=True) records every allocation
and free of the CPU allocator with its size; their running sum over the call, in time order, is
the call's peak above what was allocated before it (`peak_extra_bytes`). The inputs (the verify
logits, the drafter's kept logits for q) exist before the call, so they are not counted: what is
counted is the extra memory of issue 57's bound (target_law.EXTRA_BYTES).

The row law (target_law.row_laws) is computed before the measured call and handed back to it: on
CUDA it is the Triton kernel (sampling/row_law_triton.py), which allocates only [rows] outputs;
its CPU torch passes keep their own chunking (target_law.CHUNK_BYTES).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

from dflash_sglang.sampling import sampled_verify, target_law
from dflash_sglang.sampling.sampled_drafts import DraftProposal
from dflash_sglang_tools.bench.sampled_verify_time import cards_filter

MIB = 1 << 20


def peak_extra_bytes(run) -> tuple[int, object]:
    """(the peak bytes `run()` allocated above what was allocated before it, its result)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    now = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        now += event.nbytes()
        peak = max(peak, now)
    return peak, result


@contextlib.contextmanager
def law_given(law):
    """row_laws returns `law` (computed before): the measured call holds what CUDA's would."""
    saved = sampled_verify.row_laws, target_law.row_laws
    sampled_verify.row_laws = target_law.row_laws = lambda *args, **kwargs: law
    try:
        yield
    finally:
        sampled_verify.row_laws, target_law.row_laws = saved


@contextlib.contextmanager
def budget(extra_bytes: int):
    saved = getattr(target_law, "EXTRA_BYTES", None)  # None: a package before the bound
    target_law.EXTRA_BYTES = extra_bytes
    try:
        yield
    finally:
        target_law.EXTRA_BYTES = saved


def inputs(
    bs: int, block: int, vocab: int, seed: int = 0, dtype=torch.float32, with_q=True
) -> SimpleNamespace:
    """Random verify logits, drafts and a proposal whose q logits are kept (as `every_row`'s),
    with q's law taken from the same law function as p's (its values do not change the memory)."""
    g = torch.Generator().manual_seed(seed)
    n = block - 1
    logits = torch.randn(bs * block, vocab, generator=g).mul_(3).to(dtype)  # bf16: as a GPU's
    q_logits = torch.randn(bs * n if with_q else 1, vocab, generator=g).mul_(3).to(dtype)
    if not with_q:
        return SimpleNamespace(
            logits=logits,
            info=cards_filter(bs),
            law=target_law.row_laws(
                logits, cards_filter(bs), block, target_law.plan_for(cards_filter(bs), vocab)
            ),
        )
    info = cards_filter(bs)
    plan = target_law.plan_for(info, vocab)
    law = target_law.row_laws(logits, info, block, plan)
    q_law = target_law.row_laws(q_logits, info, n, plan)
    drafts = torch.randint(0, vocab, (bs, n), generator=g)
    flat = torch.arange(bs * n).view(bs, n)
    picked = q_logits.gather(1, drafts.view(-1, 1)).float().view(bs, n) / q_law.temperature.view(bs, n)
    q_draft = q_law.log_prob(picked.view(-1, 1), flat.view(-1)).exp().view(bs, n)
    q_draft = torch.where(q_draft > 0, q_draft, torch.full_like(q_draft, 0.5))  # some accepted

    def no_head(hidden):
        raise AssertionError("the kept logits are sliced, not recomputed")

    proposal = DraftProposal(q_draft, torch.zeros(bs, n, 1), q_law, no_head, q_logits)
    return SimpleNamespace(
        logits=logits, q_logits=q_logits, info=info, law=law, drafts=drafts, proposal=proposal
    )


def paths(x: SimpleNamespace, block: int) -> dict:
    """Each path's call, inside law_given(x.law)."""

    if "proposal" not in vars(x):
        return {"tree_draw": lambda: target_law.draw_every_row(x.logits, x.info, block, None)}

    def verify(proposal=None, block_verification=False):
        g = torch.Generator().manual_seed(1)
        return lambda: sampled_verify.sampled_accept(
            x.drafts, x.logits, x.info, block, generator=g, proposal=proposal,
            block_verification=block_verification,
        )  # fmt: skip

    torch.manual_seed(2)
    return {
        "point": verify(),
        "sampled": verify(x.proposal),
        "block": verify(x.proposal, True),
        "tree_draw": lambda: target_law.draw_every_row(x.logits, x.info, block, None),
    }


def measure(
    bs: int, block: int, vocab: int, extra_bytes: int | None = None, only=None, dtype=torch.float32
) -> dict:
    """{path: peak extra bytes} at the given shape, under `extra_bytes` (default: the package's);
    `only`: the paths to run (default: all); `dtype`: the logits' (float32, or bfloat16 as a GPU's)."""
    x = inputs(bs, block, vocab, dtype=dtype, with_q=only is None or set(only) != {"tree_draw"})
    out = {}
    with law_given(x.law), budget(extra_bytes or getattr(target_law, "EXTRA_BYTES", 0)):
        for name, run in paths(x, block).items():
            if only is None or name in only:
                out[name] = peak_extra_bytes(run)[0]
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=248_320)
    parser.add_argument("--unchunked", action="store_true", help="one chunk (the budget unbounded)")
    parser.add_argument("--paths", nargs="*", help="point, sampled, block, tree_draw (default: all)")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 logits (a GPU's)")
    args = parser.parse_args(argv)
    extra = 1 << 62 if args.unchunked else None
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    peaks = measure(args.requests, args.block, args.vocab, extra, args.paths, dtype)
    print(json.dumps({name: round(value / MIB, 1) for name, value in peaks.items()}))


if __name__ == "__main__":
    main()
