"""The verify-side tensor math at a full vocabulary: target_distribution, greedy and rejection
acceptance, eager and inside a CUDA graph (a failed capture means a host sync or a stray
allocation in the step; it is reported, not raised)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from dflash_sglang.sampling.accept import Acceptance, greedy_accept, rejection_accept
from dflash_sglang.sampling.distribution import target_distribution

from .shapes import Shapes
from .timing import Captured, median_ms, replay_vs_eager


def sampling_info(requests: int, vocab: int, device: torch.device) -> SimpleNamespace:
    """SGLang's per-request sampling parameters (duck-typed), mixed: greedy-like top-k 1, top-k 50,
    no top-k at all; min-p on."""
    top_ks = torch.tensor([1, 50, vocab], device=device, dtype=torch.int32).repeat(requests // 3 + 1)
    return SimpleNamespace(
        temperatures=torch.full((requests,), 0.7, device=device),
        top_ks=top_ks[:requests],
        top_ps=torch.full((requests,), 0.9, device=device),
        min_ps=torch.full((requests,), 0.05, device=device),
        need_min_p_sampling=True,
    )


def valid_acceptance(result: Acceptance, drafts: torch.Tensor) -> bool:
    """Sampled results differ between runs; what must hold: 1 <= length <= B and the accepted
    prefix is the drafts' own."""
    lengths, tokens = result
    block = tokens.shape[1]
    if not bool(((lengths >= 1) & (lengths <= block)).all()):
        return False
    prefix = torch.arange(block - 1, device=drafts.device) < (lengths - 1).unsqueeze(1)
    return bool(((tokens[:, :-1] == drafts) | ~prefix).all())


def check_acceptance(shapes: Shapes, device: torch.device) -> list[dict[str, Any]]:
    n, B, V = shapes.requests, shapes.block_size, shapes.vocab
    torch.manual_seed(0)
    logits = 4 * torch.randn(n * B, V, device=device, dtype=shapes.dtype)
    info = sampling_info(n, V, device)
    target_tokens = logits.view(n, B, V).argmax(-1)
    # Drafts that agree with the target's argmax ~70% of the time: acceptance lengths vary.
    noise = torch.randint(0, V, (n, B - 1), device=device)
    drafts = torch.where(torch.rand(n, B - 1, device=device) < 0.7, target_tokens[:, :-1], noise)
    probs = target_distribution(logits, info, B)

    def sums_to_one(p: torch.Tensor) -> bool:
        return bool(((p.sum(-1) - 1).abs() < 1e-3).all())

    def accepts(result: Acceptance) -> bool:
        return valid_acceptance(result, drafts)

    # (name, step, what any correct output satisfies, same output on every run)
    def greedy():
        return greedy_accept(drafts, logits.view(n, B, V).argmax(-1))

    cases: list[tuple[str, Callable[[], Any], Callable[[Any], bool], bool]] = [
        ("target_distribution", lambda: target_distribution(logits, info, B), sums_to_one, True),
        ("argmax + greedy_accept", greedy, accepts, True),
        ("rejection_accept (point drafts)", lambda: rejection_accept(drafts, probs), accepts, False),
    ]
    rows = []
    for name, fn, check, deterministic in cases:
        row: dict[str, Any] = {
            "name": name,
            "shape": f"{n} x {B} x {V}",
            "eager_ms": median_ms(fn, device, shapes.iters, shapes.warmup),
        }
        eager = fn()
        row["eager_check"] = "valid" if check(eager) else "INVALID"
        graph = Captured(fn, device)
        row.update(graph=graph.status, graph_ms=None, replay_check=None)
        if graph.ok:
            row["graph_ms"] = median_ms(graph.replay, device, shapes.iters, shapes.warmup)
            graph.replay()
            if not check(graph.outputs):
                row["replay_check"] = "INVALID"
            elif deterministic:
                row["replay_check"] = replay_vs_eager(graph.outputs, eager)
            else:
                row["replay_check"] = "valid (sampled)"
        graph.release()
        rows.append(row)
    return rows
