"""The token-wise sampled verify's Triton kernels (sampling/accept_triton.py) equal the torch path.

CI has no GPU. accept_triton_probe.py runs them under Triton's interpreter on CPU
(`TRITON_INTERPRET=1`, in a subprocess) against sampled_verify's own p(d), acceptance and final
law, with the same uniforms: point and sampled drafts, per-request lengths, block verification's
prefix weight on the final law, the cards' filter / top-p / min-p / temperature alone, V 300 and
2,500, float32 and bf16 logits, 64 requests a case. The accepted lengths are equal request for
request; the added token equals the inverse CDF of the torch path's final law at the same uniform
(a rounding tie at a CDF boundary is the only allowed difference; none occurred). The kernels also
compile for an H200 (sm_90) without one. sampled_accept runs them on CUDA; test_sampled_verify_triton.py
checks that wiring end to end. No GPU has timed them.
"""

from pathlib import Path

import pytest

from tests.interpreter_probe import run_probe


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("accept_triton_probe.py"))


def test_the_kernels_accept_and_draw_as_the_torch_path(report):
    assert len(report) == 26, sorted(report)
    for name, r in report.items():
        assert r["accepted_differ"] == 0, (name, r)
        assert r["tokens_differ_off_boundary"] == 0 and r["token_prob_zero"] == 0, (name, r)
    assert sum(r["tokens_differ"] for r in report.values()) <= 1  # at most one rounding tie


def test_the_cases_reach_rejections_whole_blocks_and_a_control_that_differs(report):
    rows = report.values()
    assert all(r["rejected"] > 20 for r in rows)  # residual draws, not only bonuses
    assert sum(r["accepted_spread"][1] == 5 for r in rows) >= 15  # whole blocks: bonus draws
    assert sum(r["control_differ"] for r in rows) > 0.5 * 64 * len(report)  # another uniform: other tokens


@pytest.mark.parametrize("sampled", [False, True])
def test_the_kernels_compile_for_an_h200(sampled):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from dflash_sglang.sampling import accept_triton as kernel

    target = GPUTarget("cuda", 90, 32)
    law = {name: "*fp32" for name in ["temperature_ptr", "cut_ptr", "log_norm_ptr"]}
    accept = {"logits_ptr": "*bf16", "stride": "i64", **law, "drafts_ptr": "*i64", "q_draft_ptr": "*fp32"}
    accept |= {"uniform_ptr": "*fp32", "counts_ptr": "*i64", "accepted_ptr": "*i64", "n_draft": "i32"}
    compiled = triton.compile(ASTSource(kernel._accept_kernel, accept), target=target)
    assert compiled.asm["cubin"]
    draw = {"logits_ptr": "*bf16", "stride": "i64", **law, "accepted_ptr": "*i64", "last_ptr": "*i64"}
    draw |= {"n_draft": "i32", "drafts_ptr": "*i64", "drop_ptr": "constexpr" if sampled else "*i32"}
    draw |= {"q_logits_ptr": "*fp32", "q_stride": "i64"}
    draw |= {f"q_{name}": "*fp32" for name in law}
    draw |= {"weight_ptr": "*fp32", "uniform_ptr": "*fp32", "out_ptr": "*i64", "vocab": "i32"}
    draw |= {"SAMPLED": "constexpr", "BLOCK": "constexpr"}
    constants = {"SAMPLED": sampled, "BLOCK": kernel.BLOCK} | ({"drop_ptr": None} if sampled else {})
    compiled = triton.compile(ASTSource(kernel._draw_kernel, draw, constexprs=constants), target=target)
    assert compiled.asm["cubin"] and "div.rn.f32" in compiled.asm["ptx"]
