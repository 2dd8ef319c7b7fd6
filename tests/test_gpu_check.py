"""`make gpu-check` on CPU at tiny shapes: the command runs without SGLang, its JSON and markdown
hold real, consistent numbers, and the pieces it measures compute the right thing."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, StaticCache

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.sampling.accept import Acceptance
from dflash_sglang_tools.gpu_check import __main__ as cli
from dflash_sglang_tools.gpu_check import acceptance, draft_step, shapes, t_positive, target
from dflash_sglang_tools.gpu_check.acceptance import valid_acceptance
from dflash_sglang_tools.gpu_check.draft_step import DraftStep, random_drafter, relative_error
from dflash_sglang_tools.gpu_check.markdown import (
    bound_rows,
    draft_share,
    fmt,
    render,
    speedup_bound,
    t_positive_math_ms,
    table,
)
from dflash_sglang_tools.gpu_check.target import TargetStep, random_target
from dflash_sglang_tools.gpu_check.timing import describe, same

from .test_config import QWEN3_8B_DRAFT

ROOT = Path(__file__).resolve().parents[1]
# Runs the CLI as a GPU machine would (PYTHONPATH=python, no install) and fails on any GPU-stack import.
RUN = """
import runpy, sys
sys.argv = ["gpu_check"] + sys.argv[1:]
runpy.run_module("dflash_sglang_tools.gpu_check", run_name="__main__")
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"sglang", "sgl_kernel", "flashinfer"})
assert not loaded, loaded
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    args = ["--markdown", str(out / "gpu.md"), "--json", str(out / "gpu.json"), "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, *args, "--iters", "2"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "gpu.json").read_text()), (out / "gpu.md").read_text()


def positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_report_names_the_setup(run):
    report, _ = run
    env = report["environment"]
    assert env["device_type"] == "cpu" and env["dtype"] == "float32" and env["graphs"] == "n/a on cpu"
    assert env["torch"] == torch.__version__ and env["transformers"]
    assert report["shapes"]["batches"] == [1, 2] and report["shapes"]["iters"] == 2
    assert report["taus"] == list(range(1, 9))


def test_every_measurement_is_a_real_number(run):
    report, _ = run
    assert [r["batch"] for r in report["drafter"]] == [1, 2]
    for r in report["drafter"]:
        assert positive(r["eager_ms"]) and r["ref_rel_err"] < 1e-5
        assert r["graph"] == "n/a on cpu" and r["graph_ms"] is None
        assert "replay_equal" in r and "replay_max_diff" in r
    names = [r["name"] for r in report["acceptance"]]
    assert names == ["target_distribution", "argmax + greedy_accept", "rejection_accept (point drafts)"]
    for r in report["acceptance"]:
        assert positive(r["eager_ms"]) and r["eager_check"] == "valid" and r["graph"] == "n/a on cpu"
    for r in report["target"]:
        assert positive(r["decode_eager_ms"]) and positive(r["verify_eager_ms"])
        assert r["decode_graph"] == r["verify_graph"] == "n/a on cpu"


def test_bound_is_recomputed_from_the_timings(run):
    report, _ = run
    drafter = {r["batch"]: r for r in report["drafter"]}
    target = {r["batch"]: r for r in report["target"]}
    for row in report["bound"]:
        b = row["batch"]
        assert row["timings"] == "eager"
        assert row["t_draft_ms"] == drafter[b]["eager_ms"]
        assert row["t_decode_ms"] == target[b]["decode_eager_ms"]
        assert row["t_verify_ms"] == target[b]["verify_eager_ms"]
        step = row["t_verify_ms"] + row["t_draft_ms"]
        assert row["draft_share"] == pytest.approx(row["t_draft_ms"] / step)
        for tau, bound in zip(report["taus"], row["bound"], strict=True):
            assert bound == pytest.approx(tau * row["t_decode_ms"] / step)


def test_markdown_shows_the_json(run):
    report, text = run
    for title in (
        "## Drafter",
        "## Verify-side math",
        "## Target",
        "## T > 0 verify math",
        "## Speedup bound",
    ):
        assert title in text
    assert "CPU (tiny shapes)" in text and "float32" in text and "| tau=8 |" in text
    for row in report["bound"]:
        line = next(x for x in text.splitlines() if x.startswith(f"| {row['batch']} | eager |"))
        assert f"{row['bound'][7]:.2f}x" in line and f"{100 * row['draft_share']:.1f}%" in line


def test_t_positive_table_times_every_path_against_the_floor(run):
    report, text = run
    rows = report["t_positive"]
    keys = [key for key, _ in t_positive.PATHS]
    assert keys[0] == "floor" and len(set(keys)) == len(keys) == 14
    expected = [(f, 1024, b) for b in (1, 2) for f in t_positive.FILTERS]
    assert [(r["filter"], r["vocab"], r["batch"]) for r in rows] == expected
    for r in rows:
        assert list(r["paths"]) == keys and r["outputs"] == "valid" and r["law_max_diff"] is None
        floor = r["paths"]["floor"]["ms"]
        assert positive(floor) and r["paths"]["floor"]["x_floor"] == 1.0
        for key, t in r["paths"].items():
            assert t["extra_mib"] is None  # no CUDA memory counters on a CPU
            # The kernels are CUDA's; the torch twins of the wired paths are CPU's default already.
            if key in ("law_triton", "point_torch", "sampled_torch", "block_torch"):
                assert t["ms"] is None and t["note"] == "n/a on cpu"
                continue
            assert positive(t["ms"]) and t["x_floor"] == pytest.approx(t["ms"] / floor)
        line = next(x for x in text.splitlines() if x.startswith(f"| {r['filter']} | 1024 | {r['batch']} | "))
        assert f"({r['paths']['block']['x_floor']:.0f}x)" in line and "| valid |" in line


def test_bound_has_a_t_positive_row_that_counts_the_math(run):
    report, text = run
    plain = {r["batch"]: r for r in report["bound"]}
    sampled = {r["batch"]: r for r in report["t_positive"] if r["filter"] == "cards"}
    assert [r["batch"] for r in report["bound_t_positive"]] == [1, 2]
    for row in report["bound_t_positive"]:
        b, zero = row["batch"], plain[row["batch"]]
        assert row["math"] == "T > 0" and zero["math"] == "T = 0" and zero["t_math_ms"] is None
        paths = sampled[b]["paths"]
        extra = max(0.0, paths["draw"]["ms"] - paths["draft_lm_head"]["ms"]) + paths["sampled"]["ms"]
        assert extra > 0 and row["t_math_ms"] == pytest.approx(extra)
        step = row["t_verify_ms"] + row["t_draft_ms"] + extra
        assert (row["t_decode_ms"], row["t_verify_ms"], row["t_draft_ms"]) == (
            zero["t_decode_ms"], zero["t_verify_ms"], zero["t_draft_ms"])  # fmt: skip
        for tau, bound in zip(report["taus"], row["bound"], strict=True):
            assert bound == pytest.approx(tau * row["t_decode_ms"] / step)
        assert any(x.startswith(f"| {b} | eager | T > 0 |") for x in text.splitlines())


def test_t_positive_math_ms():
    row = {"paths": {"draw": {"ms": 3.0}, "draft_lm_head": {"ms": 1.0}, "sampled": {"ms": 2.5}}}
    assert t_positive_math_ms(row) == pytest.approx(4.5)
    assert speedup_bound(2, t_decode=10.0, t_verify=12.0, t_draft=3.0, t_math=5.0) == pytest.approx(1.0)
    assert draft_share(t_verify=12.0, t_draft=3.0, t_math=5.0) == pytest.approx(0.15)


# ---- pure helpers ------------------------------------------------------------------------------


def test_speedup_bound_and_draft_share():
    assert speedup_bound(3, t_decode=10.0, t_verify=12.0, t_draft=3.0) == pytest.approx(2.0)
    assert speedup_bound(1, 10.0, 10.0, 0.0) == 1.0
    assert draft_share(t_verify=12.0, t_draft=3.0) == pytest.approx(0.2)


def test_bound_rows_use_graph_timings_only_when_all_three_captured():
    target = [{"batch": 1, "decode_eager_ms": 9.0, "verify_eager_ms": 11.0, "decode_graph_ms": 6.0,
               "verify_graph_ms": 7.0}]  # fmt: skip
    graphed = bound_rows([{"batch": 1, "eager_ms": 3.0, "graph_ms": 1.0}], target, taus=(2,))
    assert graphed[0]["timings"] == "graph" and graphed[0]["bound"] == [pytest.approx(2 * 6 / 8)]
    eager = bound_rows([{"batch": 1, "eager_ms": 3.0, "graph_ms": None}], target, taus=(2,))
    assert eager[0]["timings"] == "eager" and eager[0]["bound"] == [pytest.approx(2 * 9 / 14)]
    assert bound_rows([{"batch": 8, "eager_ms": 3.0, "graph_ms": None}], target) == []


def test_table_rendering():
    text = table(["a", "b"], [[1.23456, None], [True, "x | y"], [0.0001234, False]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1.235 | - |", "| yes | x \\| y |",
                                 "| 0.000123 | NO |"]  # fmt: skip
    assert fmt(0.0) == "0.000"


def test_a_capture_error_fits_a_table_cell():
    error = RuntimeError("operation not permitted when stream is capturing\nmore detail" + "x" * 300)
    text = describe(error)
    assert text.startswith("RuntimeError: operation not permitted when stream is capturing")
    assert "more detail" not in text and len(text) <= 200


def test_same_and_valid_acceptance():
    a = torch.tensor([1.0, 2.0])
    assert same((a, a), (a, a.clone())) == (True, 0.0)
    assert same(a, a + 0.5) == (False, 0.5)
    drafts = torch.tensor([[5, 6, 7]])
    assert valid_acceptance(Acceptance(torch.tensor([3]), torch.tensor([[5, 6, 9, 0]])), drafts)
    assert not valid_acceptance(Acceptance(torch.tensor([3]), torch.tensor([[5, 8, 9, 0]])), drafts)
    assert not valid_acceptance(Acceptance(torch.tensor([5]), torch.tensor([[5, 6, 7, 1]])), drafts)


# ---- what the check measures ---------------------------------------------------------------------


def test_published_shapes():
    assert shapes.QWEN3_8B_DRAFT == QWEN3_8B_DRAFT
    config = DFlashConfig.from_dict(shapes.QWEN3_8B_DRAFT)
    config.validate_against(Qwen3Config(**shapes.QWEN3_8B_TARGET))
    DFlashConfig.from_dict(shapes.tiny_draft_config()).validate_against(Qwen3Config(**shapes.TINY_TARGET))


def test_draft_step_matches_the_model_forward_and_notices_a_wrong_cache():
    torch.manual_seed(0)
    model, vocab_weight = random_drafter(shapes.tiny_draft_config(), torch.device("cpu"), torch.float32)
    with torch.inference_mode():
        step = DraftStep(model, vocab_weight, batch=2, context=24)
        hidden, tokens = step()
        assert tokens.shape == (2, 15) and relative_error(hidden, step.reference()) < 1e-5
        step.keys[0][:, :4] = 0  # an older context slot lost: the check must see it
        assert relative_error(step()[0], hidden) > 1e-3


def test_target_step_over_a_static_cache_equals_a_full_forward():
    torch.manual_seed(0)
    model = random_target(shapes.TINY_TARGET, torch.device("cpu"), torch.float32)
    with torch.inference_mode():
        cache = StaticCache(config=model.config, max_cache_len=24)
        prompt = torch.randint(0, model.config.vocab_size, (2, 16))
        model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
        for tokens in (8, 1, 8):  # verify, decode, verify again: the rewind keeps the context at 16
            step = TargetStep(model, cache, batch=2, context=16, tokens=tokens)
            logits = step()
            step.rewind()
            full = model(input_ids=torch.cat([prompt, step.input_ids], 1), use_cache=False).logits
            torch.testing.assert_close(logits, full[:, 16:], rtol=1e-4, atol=1e-4)


# ---- the graph branches, with CPU stand-ins for a capture ------------------------------------------


class ReplayOnCpu:
    """Captured's interface; `replay` reruns the step into the first call's output tensors, as a
    graph replay refreshes its static outputs."""

    def __init__(self, fn, device, after=None):
        self.fn, self.status, self.ok = fn, "ok", True
        self.outputs = fn()
        (after or (lambda: None))()

    def replay(self):
        new = self.fn()
        pairs = zip(self.outputs, new, strict=True) if isinstance(new, tuple) else [(self.outputs, new)]
        for static, value in pairs:
            static.copy_(value)

    def release(self):
        pass


class FailsToCapture(ReplayOnCpu):
    def __init__(self, fn, device, after=None):
        self.status, self.ok, self.outputs = "capture failed: RuntimeError: a host sync | here", False, None


def run_with(monkeypatch, captured):
    for module in (draft_step, acceptance, target):
        monkeypatch.setattr(module, "Captured", captured)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return cli.run(shapes.cpu_shapes(iters=1, warmup=0), torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)


def test_replayed_steps_are_timed_compared_and_used_for_the_bound(monkeypatch):
    report = run_with(monkeypatch, ReplayOnCpu)
    for r in report["drafter"]:
        assert r["graph"] == "ok" and positive(r["graph_ms"]) and r["replay_equal"] is True
        assert r["replay_max_diff"] == 0.0
    checks = [r["replay_check"] for r in report["acceptance"]]
    assert checks == ["equal", "equal", "valid (sampled)"]
    for r in report["target"]:
        assert positive(r["decode_graph_ms"]) and positive(r["verify_graph_ms"])
        assert r["decode_replay"] == r["verify_replay"] == "equal"
    assert {r["timings"] for r in report["bound"]} == {"graph"}
    b = report["bound"][0]
    assert b["t_draft_ms"] == report["drafter"][0]["graph_ms"]
    assert b["bound"][0] == pytest.approx(b["t_decode_ms"] / (b["t_verify_ms"] + b["t_draft_ms"]))
    assert "| ok | yes | 0.000 |" in render(report)


def test_a_failed_capture_is_reported_and_the_bound_falls_back_to_eager(monkeypatch):
    report = run_with(monkeypatch, FailsToCapture)
    rows = report["drafter"] + report["acceptance"]
    assert all(r["graph"].startswith("capture failed: RuntimeError") for r in rows)
    assert all(r["graph_ms"] is None for r in rows)
    assert {r["timings"] for r in report["bound"]} == {"eager"}
    assert "capture failed: RuntimeError: a host sync \\| here" in render(report)
