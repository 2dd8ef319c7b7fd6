"""The row law of one fixed batch through both branches of `target_law.row_laws` (the torch passes
and the CUDA kernel, row_law_triton.py, run by Triton's interpreter on CPU tensors), in whichever
package is first on PYTHONPATH: the product, or a copy with a planted bug and its kernel twin
(tests/planted/plant.py). test_row_law_twins.py compares both with the product's torch law.

Prints a JSON report as the last stdout line: per branch, every row's cut and log_norm.
"""

import json
from types import SimpleNamespace

import torch

BLOCK = 4  # rows a request: the draft_temperature_off bug tilts the first three
SETTINGS = [  # per request: (temperature, top_k, top_p, min_p)
    (0.5, 1 << 30, 0.9, 0.0),  # top-p at a low temperature
    (1.5, 1 << 30, 0.8, 0.0),  # top-p at a high temperature
    (0.7, 30, 0.95, 0.0),  # the cards' filter
    (0.6, 1 << 30, 1.0, 0.1),  # min-p alone
    (1.3, 1 << 30, 1.0, 0.05),  # min-p at a high temperature
    (0.8, 20, 0.9, 0.02),  # every filter
]
VOCAB = 200


def batch() -> tuple[torch.Tensor, SimpleNamespace]:
    """[len(SETTINGS) * BLOCK, VOCAB] logits, each row with its own maximum, and the settings."""
    g = torch.Generator().manual_seed(0)
    rows = len(SETTINGS) * BLOCK
    logits = torch.randn(rows, VOCAB, generator=g) * 2 + torch.linspace(0.0, 4.0, rows).unsqueeze(-1)
    t, k, p, m = (list(c) for c in zip(*SETTINGS, strict=True))
    info = SimpleNamespace(
        temperatures=torch.tensor(t).view(-1, 1),
        top_ks=torch.tensor(k),
        top_ps=torch.tensor(p),
        min_ps=torch.tensor(m),
        need_top_k_sampling=True,
        need_top_p_sampling=True,
        need_min_p_sampling=True,
        max_top_k=None,
    )
    return logits, info


def laws(devices: tuple[str, ...]) -> dict:
    """row_laws with the kernel's branch open to `devices` (("cpu",): the kernel, (): torch)."""
    from dflash_sglang.sampling import target_law

    logits, info = batch()
    plan = target_law.plan_for(info, VOCAB, [SimpleNamespace(sampling_params=SimpleNamespace(
        top_k=int(k), top_p=float(p))) for _, k, p, _ in SETTINGS])  # fmt: skip
    saved = target_law.TRITON_ROW_LAW_DEVICES
    target_law.TRITON_ROW_LAW_DEVICES = devices
    try:
        law = target_law.row_laws(logits, info, BLOCK, plan)
    finally:
        target_law.TRITON_ROW_LAW_DEVICES = saved
    return {
        "cut": law.cut.tolist(),
        "log_norm": law.log_norm.tolist(),
        "temperature": law.temperature.tolist(),
    }


def main():
    print(json.dumps({"torch": laws(()), "kernel": laws(("cpu",))}))


if __name__ == "__main__":
    main()
