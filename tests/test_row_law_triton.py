"""The fused Triton row-law kernel (sampling/row_law_triton.py) equals target_law's torch passes.

CI has no GPU, so the kernel's CUDA branch of `row_laws` is exercised only here, two ways:

- Triton's interpreter on CPU (`TRITON_INTERPRET=1`, in a subprocess: it must be set before Triton
  loads) runs row_law_triton_probe.py: `row_laws` with the kernel's branch opened to CPU tensors
  against `row_laws` as CPU runs it, at V = 64, 300, 1000; random, coarse-grid (ties everywhere),
  repeated-top (ties at top-k / top-p cuts), half -inf and bf16 logits; temperature 0.3-1.5; no
  filter, each filter alone at its edges (top_k 1 .. V, top_p 1e-4 .. 0.999, min_p 0.05 and 0.5)
  and combined; the sort plan, a top-k window plan, min-p alone, temperature alone. Every row's
  kept set equal token for token, the cut equal to the bit, log_norm to float rounding.
- The real compiler, for an H200 (sm_90) without one: the kernel lowers to PTX and a cubin, with
  IEEE division of the logits by the temperature (as torch's; a reciprocal multiply changes kept
  sets, the probe showed).

No GPU timing exists yet: the GPU check should time it when a device is lent.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dflash_sglang.sampling import target_law
from tests.interpreter_probe import run_probe


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("row_law_triton_probe.py"))


def test_the_kernel_keeps_exactly_the_torch_paths_tokens(report):
    assert len(report) == 24, sorted(report)
    for name, r in report.items():
        assert r["kept_set_differs"] == 0, (name, r)
        assert r["cut_bits_differ"] == 0, (name, r)
        assert r["log_norm_max_abs_diff"] <= 1e-5 and r["log_norm_nonfinite_differ"] == 0, (name, r)


def test_the_cases_reach_ties_single_tokens_and_several_passes(report):
    rows = report.values()
    assert sum(r["cut_in_tie_group"] for r in rows) >= 30  # a cut inside a group of tied values
    assert sum(r["single_token_kept"] for r in rows) >= 10  # top_k 1, top_p near 0
    assert max(r["max_passes"] for r in rows) >= 3  # the search narrows more than once
    assert all(r["partial_kept_sets"] > 0 for name, r in report.items() if "temperature_only" not in name)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_kernel_compiles_for_an_h200(dtype):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from dflash_sglang.sampling import row_law_triton as kernel

    pointers = ["temperature_ptr", "top_p_ptr", "log_min_p_ptr", "cut_ptr", "log_norm_ptr"]
    signature = {"logits_ptr": f"*{dtype}", "stride": "i64", "vocab": "i32", "top_k_ptr": "*i32"}
    signature |= {name: "*fp32" for name in pointers} | {"passes_ptr": "constexpr"}
    constants = {"BLOCK": kernel.BLOCK, "SEARCH_BLOCK": kernel.SEARCH_BLOCK, "PIVOTS": kernel.PIVOTS}
    constants |= {"MAX_PASSES": kernel.MAX_PASSES, "passes_ptr": None}
    signature |= dict.fromkeys(["BLOCK", "SEARCH_BLOCK", "PIVOTS", "MAX_PASSES"], "constexpr")
    source = ASTSource(kernel._row_law_kernel, signature, constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    assert compiled.asm["cubin"] and "div.rn.f32" in compiled.asm["ptx"]


def test_cpu_logits_keep_the_torch_path(monkeypatch):
    assert "cpu" not in target_law.TRITON_ROW_LAW_DEVICES
    from dflash_sglang.sampling import row_law_triton

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel ran on CPU logits")

    monkeypatch.setattr(row_law_triton, "row_laws_triton", refuse)
    info = type("Info", (), {})()
    info.temperatures, info.top_ks = torch.tensor([0.7]), torch.tensor([3])
    info.top_ps, info.min_ps = torch.tensor([0.9]), torch.tensor([0.0])
    law = target_law.row_laws(torch.randn(2, 50), info, 2, target_law.LawPlan(0, True, True, False))
    assert law.cut.shape == (2,) and law.log_norm.isfinite().all()


def test_the_switch_turns_the_kernel_off():
    code = "from dflash_sglang.sampling import target_law; print(target_law.TRITON_ROW_LAW_DEVICES)"
    for value, expected in (("0", "()"), ("1", "('cuda',)")):
        env = {**os.environ, "DFLASH_SGLANG_TRITON_ROW_LAW": value}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.stdout.strip() == expected, done.stderr[-2000:]
