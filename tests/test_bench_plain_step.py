"""`make bench-plain-step`'s clock and arithmetic (bench/phase_clock.py, bench/plain_step_cpu.py):
the clock wraps a phase when its module loads and dumps each phase's CPU time with the process's;
the tool splits a level's CPU into the model forwards and the rest, and pairs each server with the
no-spec server of its own repeat."""

from __future__ import annotations

import sys
import time

import pytest

from dflash_sglang_tools.bench import phase_clock, plain_step_cpu
from dflash_sglang_tools.bench.plain_step_cpu import BASELINE, columns, summary

MODULE = "clock_probe_module"


def test_the_clock_wraps_a_phase_as_its_module_loads_and_dumps_its_cpu_time(tmp_path, monkeypatch):
    (tmp_path / f"{MODULE}.py").write_text(
        "class Step:\n    def run(self, n):\n        return sum(i * i for i in range(n))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(phase_clock, "PHASES", [(MODULE, "Step", "run")])
    monkeypatch.setattr(phase_clock, "DUMP_EVERY", 0.05)
    prefix = tmp_path / "clock"
    monkeypatch.setenv(phase_clock.ENV, str(prefix))
    before = list(sys.meta_path)
    phase_clock.install()
    try:
        import clock_probe_module  # noqa: PLC0415 - loaded under the clock

        assert clock_probe_module.Step().run(200_000) == sum(i * i for i in range(200_000))  # the method
        for _ in range(3):
            clock_probe_module.Step().run(200_000)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and "Step.run" not in phase_clock.read(str(prefix)):
            time.sleep(0.05)
        sums = phase_clock.read(str(prefix))
    finally:
        sys.meta_path[:] = before
        sys.modules.pop(MODULE, None)
    seconds, calls = sums["Step.run"]
    assert calls == 4
    assert 0 < seconds <= sums[phase_clock.PROCESS][0]


def test_the_sitecustomize_loads_the_clock_by_its_path(tmp_path):
    folder = phase_clock.sitecustomize_dir(tmp_path)
    text = (folder / "sitecustomize.py").read_text()
    assert phase_clock.__file__ in text and "install()" in text
    assert "dflash_sglang" not in text.replace(phase_clock.__file__, "")  # never the package


def test_a_level_splits_into_the_forwards_and_the_rest():
    ms = {phase_clock.PROCESS: 500.0, "ModelRunner.forward": 400.0, "Scheduler.run_batch": 450.0,
          "Scheduler.get_next_batch_to_run": 20.0, "Scheduler.process_batch_result": 25.0,
          "Drafting.__call__": 7.0}  # fmt: skip
    cell = columns(ms)
    assert cell["total"] == 500.0 and cell["forward"] == 400.0
    assert cell["not_forward"] == 100.0  # everything but the forwards
    assert cell["step_not_forward"] == 50.0  # the step's own work
    assert cell["planning"] == 20.0 and cell["results"] == 25.0 and cell["draft"] == 7.0
    assert cell["commit"] == 0.0  # a phase that did not run


def run(label_totals: dict, not_forward: dict) -> dict:
    def cell(label, total):
        return {"total": total, "not_forward": not_forward[label], "forward": total - not_forward[label]}

    return {label: {"T0.0 c1": cell(label, total)} for label, total in label_totals.items()}


def test_each_server_is_paired_with_no_spec_of_its_own_repeat():
    """A slow repeat for both servers leaves the ratio where it is: the paired medians are 1.1
    (in all) and 1.5 (not a forward), though the pooled medians would say otherwise."""
    ours = plain_step_cpu.SERVERS[1].label
    runs = [
        run({BASELINE: 100.0, ours: 110.0}, {BASELINE: 20.0, ours: 30.0}),
        run({BASELINE: 200.0, ours: 220.0}, {BASELINE: 40.0, ours: 60.0}),
        run({BASELINE: 150.0, ours: 165.0}, {BASELINE: 30.0, ours: 45.0}),
    ]
    rows = {row["server"]: row for row in summary(runs)}
    assert rows[ours]["total_vs_no_spec"] == pytest.approx(1.1)
    assert rows[ours]["not_forward_vs_no_spec"] == pytest.approx(1.5)
    assert rows[ours]["total_range"] == [1.1, 1.1]
    assert rows[BASELINE]["total_vs_no_spec"] == 1.0
    assert rows[ours]["total"] == 165.0  # the median over the repeats
