"""The decode step keeps the shape a maintainer can hold (issue 59, docs/architecture.md): a short
step, a constructor that wires phases from settings resolved once, phases never finished after
construction, no name forwarded to the target worker, the step's plan as a value, files a reader
can take in, and a budget on the branches along the step's path (dflash_sglang_tools.step_branches)."""

import ast
from pathlib import Path

import pytest

from dflash_sglang_tools import step_branches

PYTHON = Path(__file__).resolve().parents[1] / "python"
PACKAGE = PYTHON / "dflash_sglang"
WORKERS = [PACKAGE / "worker.py", PACKAGE / "overlap.py"]

# Measured when the step's plan became a value (issue 59): 168 before, 138 after. A new concern
# belongs in its own module behind a small call, not in more branches on the path. 152: the plain
# step's decode forward (step/plain_forward.py, issue 64) is one choice on the path and its record.
# 160: the plain hold (width/plain_hold.py, issue 64), whose few branches on the path spare the
# ranking's many on most steps where drafts rarely fit (the policy's branches run once a step).
STEP_BRANCH_BUDGET = 160


def methods(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {
        f"{cls.name}.{node.name}": node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef)
    }


def body_lines(function: ast.FunctionDef) -> int:
    """Lines from the first statement after the docstring to the end."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1


def test_the_decode_step_reads_on_one_screen():
    step = methods(PACKAGE / "worker.py")["DFlashWorker.forward_batch_generation"]
    assert body_lines(step) <= 20, f"forward_batch_generation is {body_lines(step)} lines"


def test_the_constructor_wires_phases_from_settings_resolved_once():
    init = methods(PACKAGE / "worker.py")["DFlashWorker.__init__"]
    assert body_lines(init) <= 40, f"DFlashWorker.__init__ is {body_lines(init)} lines"
    calls = {
        node.func.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "resolve" in calls, "the settings are resolved in the constructor (DFlashSettings.resolve)"
    branches = [node for node in ast.walk(init) if isinstance(node, ast.If | ast.IfExp)]
    assert not branches, f"the constructor decides at lines {[b.lineno for b in branches]}"


@pytest.mark.parametrize("path", WORKERS, ids=lambda p: p.name)
def test_no_phase_is_finished_after_construction(path):
    """`self.phase.attr = ...` anywhere in the worker: a phase completed from outside."""
    late = [
        f"{name}:{node.lineno}"
        for name, function in methods(path).items()
        for node in ast.walk(function)
        if isinstance(node, ast.Assign | ast.AugAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Attribute)
        and isinstance(target.value.value, ast.Name)
        and target.value.value.id == "self"
    ]
    assert not late, late


@pytest.mark.parametrize("path", WORKERS, ids=lambda p: p.name)
def test_no_name_is_forwarded_to_the_target_worker(path):
    assert not [name for name in methods(path) if name.endswith(".__getattr__")]


def test_no_phase_reads_the_width_policys_state_mid_step():
    """The plan travels as a value (runtime/step_plan.py): drafting and verifying never hold the
    width policy."""
    for name in ("drafting.py", "chain_drafts.py", "tree_drafting.py", "verifying.py"):
        source = (PACKAGE / "step" / name).read_text()
        assert "widths" not in source, f"step/{name} reads the width policy"


@pytest.mark.parametrize("root", [PACKAGE, PYTHON / "dflash_sglang_tools"], ids=lambda p: p.name)
def test_no_module_over_400_lines(root):
    lines = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert not {name: n for name, n in lines.items() if n > 400}


def test_the_steps_path_stays_within_its_branch_budget():
    total, seen, _ = step_branches.count(PACKAGE)
    assert "worker:DFlashWorker.forward_batch_generation" in seen
    assert any(key.startswith("step.verifying:") for key in seen), "the count follows the phases"
    assert total <= STEP_BRANCH_BUDGET, f"{total} branches on the step's path (budget {STEP_BRANCH_BUDGET})"
