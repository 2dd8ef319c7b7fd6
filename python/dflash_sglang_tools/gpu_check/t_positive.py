"""The T > 0 table: what each verify rule of dflash_sglang.sampling costs at temperature > 0, next
to the memory floor (one read of the [bs x B, V] verify logits) and to greedy, at full vocabularies.

Inputs as the H200 sampling probe (the shared notes' gpu-sampling-probe.py) builds them: float32 verify logits
(3 * randn), argmax drafts that agree for the first 5 positions, the drafter's features and a
random LM head in the check's dtype. Every path is the package's own function, eager; the tree's
draw is `target_law.draw_every_row`, as the tree rule calls it. On CUDA `point`, `sampled` and
`block` take the Triton kernels (the row law, the acceptance and the draw), and their `, torch`
twins the torch path with both kernel branches closed (on CPU the default is that path already).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from dflash_sglang.sampling import sampled_verify, target_law
from dflash_sglang.sampling.accept import greedy_accept
from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept
from dflash_sglang.sampling.target_law import draw_every_row, plan_for, row_laws
from dflash_sglang.tree.batch import build_batch_trees

from .acceptance import valid_acceptance
from .shapes import Shapes
from .timing import NOT_ON_CPU, median_ms

# (key, column title); "floor" first: every other path is reported as x it.
PATHS: tuple[tuple[str, str], ...] = (
    ("floor", "one read"),
    ("greedy", "greedy"),
    ("law_torch", "law, torch"),
    ("law_triton", "law, Triton"),
    ("point", "point drafts"),
    ("point_torch", "point, torch"),
    ("draft_lm_head", "draft LM head"),
    ("draw", "draw"),
    ("sampled", "sampled"),
    ("sampled_torch", "sampled, torch"),
    ("block", "block"),
    ("block_torch", "block, torch"),
    ("tree_draw", "tree draw"),
    ("tree_build", "tree build"),
)
FILTERS = ("cards", "top_p only")
TREE_CHILDREN = 8  # at most 8 children a node, as in the H200 tree probe


def sampling_info(kind: str, bs: int, vocab: int, device: torch.device) -> SimpleNamespace:
    """SGLang's SamplingBatchInfo (duck-typed). "cards": the model cards' T 0.6, top-k 20, top-p
    0.95 with SGLang's host bound max_top_k = 20 (a top-k window, no sort); "top_p only": T 0.6,
    top-p 0.95 and no top-k, the worst case (every row sorted)."""
    cards = kind == "cards"
    return SimpleNamespace(
        temperatures=torch.full((bs, 1), 0.6, device=device),
        top_ks=torch.full((bs,), 20 if cards else vocab, dtype=torch.int32, device=device),
        top_ps=torch.full((bs,), 0.95, device=device),
        min_ps=torch.zeros(bs, device=device),
        is_all_greedy=False,
        need_top_k_sampling=cards,
        need_top_p_sampling=True,
        need_min_p_sampling=False,
        max_top_k=20 if cards else None,
    )


@contextlib.contextmanager
def kernel_devices(devices: tuple[str, ...]):
    """The kernels' branches for this block (target_law's row law, sampled_verify's acceptance and
    draw): ("cuda",) takes the Triton kernels, () the torch path."""
    previous = target_law.TRITON_ROW_LAW_DEVICES, sampled_verify.TRITON_ACCEPT_DEVICES
    target_law.TRITON_ROW_LAW_DEVICES = sampled_verify.TRITON_ACCEPT_DEVICES = devices
    try:
        yield
    finally:
        target_law.TRITON_ROW_LAW_DEVICES, sampled_verify.TRITON_ACCEPT_DEVICES = previous


def extra_memory_mib(fn: Callable[[], Any], device: torch.device) -> float | None:
    """Peak memory one call allocates beyond what was live before it (outputs included)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - before) / 2**20


class Inputs:
    """One (vocabulary, batch) point: the verify logits, argmax drafts, the drafter's features and
    a random LM head, as the probe builds them."""

    def __init__(self, head: torch.Tensor, bs: int, block: int, device: torch.device):
        vocab, hidden = head.shape
        self.bs, self.block, self.vocab, self.head_weight = bs, block, vocab, head
        self.logits = 3 * torch.randn(bs * block, vocab, device=device)
        drafts = self.logits.view(bs, block, vocab).argmax(-1)[:, :-1].clone()
        drafts[:, 5:] = 7  # the first 5 agree with the target's argmax: acceptance lengths vary
        self.drafts = drafts
        self.features = torch.randn(bs, block - 1, hidden, device=device, dtype=head.dtype)
        self.roots = torch.randint(0, vocab, (bs,), device=device)
        draft_logits = self.head(self.features.flatten(0, 1)).float()
        self.draft_logprobs = torch.log_softmax(draft_logits, -1).view(bs, block - 1, vocab)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.head_weight.T


def paths(x: Inputs, info, device: torch.device) -> dict[str, Callable[[], Any] | None]:
    B, V = x.block, x.vocab
    plan = plan_for(info, V)
    drafts, proposal = draw_drafts(x.features, x.head, info, V)

    def law(devices):
        def call():
            with kernel_devices(devices):
                return row_laws(x.logits, info, B, plan)

        return call

    def on_torch(fn):  # the torch path beside CUDA's kernels; on CPU the default is it already
        def call():
            with kernel_devices(()):
                return fn()

        return call if device.type == "cuda" else None

    def point():
        return sampled_accept(x.drafts, x.logits, info, B)

    def sampled():
        return sampled_accept(drafts, x.logits, info, B, proposal=proposal)

    def block():
        return sampled_accept(drafts, x.logits, info, B, proposal=proposal, block_verification=True)

    return {
        "floor": lambda: x.logits.amax(-1),
        "greedy": lambda: greedy_accept(x.drafts, x.logits.view(x.bs, B, V).argmax(-1)),
        "law_torch": law(()),
        "law_triton": law(("cuda",)) if device.type == "cuda" else None,
        "point": point,
        "point_torch": on_torch(point),
        "draft_lm_head": lambda: x.head(x.features.flatten(0, 1)),
        "draw": lambda: draw_drafts(x.features, x.head, info, V),
        "sampled": sampled,
        "sampled_torch": on_torch(sampled),
        "block": block,
        "block_torch": on_torch(block),
        "tree_draw": lambda: draw_every_row(x.logits, info, B, None),
        "tree_build": lambda: build_batch_trees(x.roots, x.draft_logprobs, B - 1, TREE_CHILDREN),
    }


def outputs_valid(x: Inputs, info) -> bool:
    """What any correct output satisfies: accepted prefixes are the drafts', lengths in 1..B, the
    laws' normalisers agree between the kernel and torch, tokens inside the vocabulary."""
    B, V = x.block, x.vocab
    drafts, proposal = draw_drafts(x.features, x.head, info, V)
    ok = True
    for devices in [("cuda",), ()] if x.logits.is_cuda else [()]:  # the kernels and the torch path
        with kernel_devices(devices):
            ok &= valid_acceptance(sampled_accept(x.drafts, x.logits, info, B), x.drafts)
            ok &= valid_acceptance(sampled_accept(drafts, x.logits, info, B, proposal=proposal), drafts)
            block = sampled_accept(drafts, x.logits, info, B, proposal=proposal, block_verification=True)
            ok &= valid_acceptance(block, drafts)
    tree = draw_every_row(x.logits, info, B, None)
    ok &= tree.shape == (x.bs, B) and bool(((tree >= 0) & (tree < V)).all())
    built = build_batch_trees(x.roots, x.draft_logprobs, B - 1, TREE_CHILDREN)
    return ok and built.tokens.shape == (x.bs, B)


def law_difference(x: Inputs, info) -> float:
    """max |log_norm| difference between the Triton kernel and the torch path (CUDA only)."""
    plan = plan_for(info, x.vocab)
    with kernel_devices(("cuda",)):
        kernel = row_laws(x.logits, info, x.block, plan)
    with kernel_devices(()):
        torch_law = row_laws(x.logits, info, x.block, plan)
    return (kernel.log_norm - torch_law.log_norm).abs().max().item()


def time_t_positive(shapes: Shapes, device: torch.device) -> list[dict[str, Any]]:
    rows = []
    torch.manual_seed(0)
    for vocab, hidden in shapes.sampled_vocabs:
        head = 0.02 * torch.randn(vocab, hidden, device=device, dtype=shapes.dtype)
        for bs in shapes.sampled_batches:
            x = Inputs(head, bs, shapes.block_size, device)
            for kind in FILTERS:
                info = sampling_info(kind, bs, vocab, device)
                row: dict[str, Any] = {"filter": kind, "vocab": vocab, "hidden": hidden, "batch": bs}
                timed: dict[str, dict[str, Any]] = {}
                for name, fn in paths(x, info, device).items():
                    if fn is None:
                        timed[name] = {"ms": None, "x_floor": None, "extra_mib": None, "note": NOT_ON_CPU}
                        continue
                    ms = median_ms(fn, device, shapes.iters, shapes.warmup)
                    timed[name] = {"ms": ms, "extra_mib": extra_memory_mib(fn, device)}
                floor = timed["floor"]["ms"]
                for t in timed.values():
                    if t["ms"] is not None:
                        t["x_floor"] = t["ms"] / floor
                row["paths"] = timed
                row["outputs"] = "valid" if outputs_valid(x, info) else "INVALID"
                row["law_max_diff"] = law_difference(x, info) if device.type == "cuda" else None
                rows.append(row)
            del x
        del head
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows
