"""The fused row-law kernel (sampling/row_law_triton.py) against target_law's torch passes, run by
Triton's interpreter on CPU (`TRITON_INTERPRET=1`, set by test_row_law_triton.py before Triton
loads). Both go through `target_law.row_laws` on the same CPU tensors: once as CPU logits are
(the torch passes), once with the kernel's branch opened to CPU (`TRITON_ROW_LAW_DEVICES`), so the
wiring is what is compared, not only the kernel.

Per row: the kept set {s >= cut} token by token, the cut's bits, log_norm. Prints a JSON report as
the last stdout line.
"""

import json
import math
from types import SimpleNamespace

import torch

from dflash_sglang.sampling import row_law_triton, target_law
from dflash_sglang.sampling.target_law import LawPlan, row_laws

VOCABS = (64, 300, 1000)
SORT = LawPlan(window=0, sort=True, top_p=True, min_p=True)  # every filter, the top-p sort


def settings(vocab: int) -> list[tuple[int, float, float]]:
    """(top_k, top_p, min_p): none, each filter alone at its edges, and combined."""
    alone = [(k, 1.0, 0.0) for k in (1, 3, 17, vocab - 1, vocab)]
    alone += [(vocab, p, 0.0) for p in (1e-4, 0.3, 0.9, 0.999)]
    alone += [(vocab, 1.0, m) for m in (0.05, 0.5)]
    both = [(17, 0.9, 0.05), (3, 0.3, 0.0), (vocab, 0.999, 0.5), (1, 0.5, 0.5), (vocab - 1, 1e-4, 0.0)]
    both += [(40, 0.95, 0.01), (vocab, 0.95, 0.05), (17, 1.0, 0.5)]
    return alone + both


def logit_rows(kind: str, n: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    base = torch.randn(n, vocab, generator=generator) * 3
    if kind == "ties":  # a coarse grid: every cut lands in a group of tied values
        return (base * 2).round() / 4
    if kind == "top_ties":  # the largest values repeated: top-k and top-p cuts inside tie groups
        top = base.topk(8, dim=-1).values
        idx = torch.randint(0, vocab, (n, 24), generator=generator)
        return base.scatter(1, idx, top.repeat(1, 3))
    if kind == "masked":  # half the vocabulary -inf (as a grammar mask would leave it)
        return base.masked_fill(torch.rand(n, vocab, generator=generator) < 0.5, float("-inf"))
    return base


def compare(logits: torch.Tensor, cases: list, plan: LawPlan, passes: list) -> dict:
    n = logits.shape[0]
    info = SimpleNamespace(
        temperatures=torch.tensor([c[0] for c in cases]),
        top_ks=torch.tensor([c[1] for c in cases]),
        top_ps=torch.tensor([c[2] for c in cases]),
        min_ps=torch.tensor([c[3] for c in cases]),
    )
    target_law.TRITON_ROW_LAW_DEVICES = ()
    torch_law = row_laws(logits, info, 1, plan)
    target_law.TRITON_ROW_LAW_DEVICES = ("cpu",)
    kernel_law = row_laws(logits, info, 1, plan)
    target_law.TRITON_ROW_LAW_DEVICES = ()
    scaled = logits.float() / torch_law.temperature.unsqueeze(-1)
    kept_torch = scaled >= torch_law.cut.unsqueeze(-1)
    kept_kernel = scaled >= kernel_law.cut.unsqueeze(-1)
    same_set = (kept_torch == kept_kernel).all(-1)
    finite = torch_law.log_norm.isfinite()
    diff = (torch_law.log_norm - kernel_law.log_norm).abs()
    both_inf = (~finite) & (torch_law.log_norm == kernel_law.log_norm)
    tied = ((scaled == torch_law.cut.unsqueeze(-1)).sum(-1) > 1) & kept_torch.any(-1)
    partial = kept_torch.any(-1) & ~kept_torch.all(-1)
    bad = (~same_set).nonzero().flatten().tolist()
    return {
        "rows": n,
        "kept_set_differs": int((~same_set).sum()),
        "cut_bits_differ": int((torch_law.cut.view(torch.int32) != kernel_law.cut.view(torch.int32)).sum()),
        "log_norm_max_abs_diff": float(diff[finite].max()) if finite.any() else 0.0,
        "log_norm_nonfinite_differ": int((~finite & ~both_inf).sum()),
        "cut_in_tie_group": int(tied.sum()),
        "partial_kept_sets": int(partial.sum()),
        "single_token_kept": int((kept_torch.sum(-1) == 1).sum()),
        "max_passes": max(passes[-1]) if passes else 0,
        "mean_passes": sum(passes[-1]) / n if passes else 0.0,
        "bad_cases": [cases[i] for i in bad[:5]],
    }


def main():
    passes: list[list[int]] = []
    kernel = row_law_triton.row_laws_triton

    def counted(*args):  # the same call, with the kernel's search passes recorded
        out = torch.zeros(args[0].shape[0], dtype=torch.int32)
        result = kernel(*args, passes=out)
        passes.append(out.tolist())
        return result

    row_law_triton.row_laws_triton = counted
    generator = torch.Generator().manual_seed(0)
    report = {}
    for vocab in VOCABS:
        for kind in ("normal", "ties", "top_ties", "masked", "bf16"):
            grid = settings(vocab)
            logits = logit_rows("normal" if kind == "bf16" else kind, len(grid), vocab, generator)
            if kind == "bf16":
                logits = logits.to(torch.bfloat16)
            temps = (0.3 + 1.2 * torch.rand(len(grid), generator=generator)).tolist()
            cases = [(t, *c) for t, c in zip(temps, grid, strict=True)]
            report[f"V{vocab}/{kind}/sort"] = compare(logits, cases, SORT, passes)
        # The window plan (every row's top_k finite and <= the window), min-p alone, temperature only.
        logits = logit_rows("ties", 8, vocab, generator)
        temps = (0.3 + 1.2 * torch.rand(8, generator=generator)).tolist()
        windowed = [
            (t, k, p, m)
            for t, (k, p, m) in zip(
                temps,
                [
                    (1, 1.0, 0.0),
                    (3, 0.3, 0.0),
                    (17, 0.9, 0.05),
                    (17, 1e-4, 0.0),
                    (40, 0.95, 0.01),
                    (40, 0.999, 0.5),
                    (5, 1.0, 0.5),
                    (40, 1.0, 0.0),
                ],
                strict=True,
            )
        ]
        report[f"V{vocab}/ties/window40"] = compare(logits, windowed, LawPlan(40, False, True, True), passes)
        report[f"V{vocab}/ties/min_p_only"] = compare(logits, windowed, LawPlan(0, False, True, True), passes)
        report[f"V{vocab}/ties/temperature_only"] = compare(
            logits, windowed, LawPlan(0, False, False, False), passes
        )
    assert all(math.isfinite(r["log_norm_max_abs_diff"]) for r in report.values())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
