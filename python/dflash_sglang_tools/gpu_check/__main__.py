"""python -m dflash_sglang_tools.gpu_check --markdown OUT.md --json OUT.json [--device cuda|cpu]

Needs torch and transformers only (no SGLang, no install: PYTHONPATH=python works); docs/gpu.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch
import transformers

from .acceptance import check_acceptance
from .draft_step import check_drafter
from .markdown import TAUS, bound_rows, render
from .shapes import Shapes, cpu_shapes, gpu_shapes
from .t_positive import time_t_positive
from .target import time_target
from .timing import NOT_ON_CPU


def environment(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (tiny shapes)"
    return {
        "device": name,
        "device_type": device.type,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda if device.type == "cuda" else None,
        "dtype": str(dtype).removeprefix("torch."),
        "graphs": "CUDA graphs" if device.type == "cuda" else NOT_ON_CPU,
    }


@torch.inference_mode()
def run(shapes: Shapes, device: torch.device) -> dict[str, Any]:
    # The target is the largest model: the drafter's and the sampling graphs are freed before it.
    torch.manual_seed(0)
    progress("drafter")
    drafter = check_drafter(shapes, device)
    progress("target_distribution and acceptance")
    acceptance = check_acceptance(shapes, device)
    progress("T > 0 verify math")
    sampled = time_t_positive(shapes, device)
    progress("target")
    target = time_target(shapes, device)
    return {
        "environment": environment(device, shapes.dtype),
        "shapes": shapes.summary(),
        "taus": list(TAUS),
        "drafter": drafter,
        "acceptance": acceptance,
        "target": target,
        "t_positive": sampled,
        "bound": bound_rows(drafter, target),
        "bound_t_positive": bound_rows(drafter, target, t_positive=sampled, vocab=shapes.vocab),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m dflash_sglang_tools.gpu_check", description=__doc__)
    parser.add_argument("--markdown", type=Path, required=True, help="where to write the table")
    parser.add_argument("--json", type=Path, required=True, help="where to write the numbers")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda if present")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per measurement")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls before them")
    args = parser.parse_args(argv)

    kind = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    shapes = gpu_shapes() if kind == "cuda" else cpu_shapes()
    shapes = dataclasses.replace(shapes, **_given(iters=args.iters, warmup=args.warmup))
    threads = torch.get_num_threads()
    if kind == "cpu":
        torch.set_num_threads(1)  # tiny ops: more threads only spin against a shared CI core
    try:
        report = run(shapes, torch.device(kind))
    finally:
        torch.set_num_threads(threads)

    text = render(report)
    for path, content in ((args.markdown, text), (args.json, json.dumps(report, indent=2) + "\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    print(text)
    return report


def progress(what: str) -> None:
    print(f"gpu_check: {what} ...", file=sys.stderr, flush=True)


def _given(**values: int | None) -> dict[str, int]:
    return {k: v for k, v in values.items() if v is not None}


if __name__ == "__main__":
    main(sys.argv[1:])
