"""The planted-bug catalogue (tests/planted/) stays able to plant, and the law judge catches a
planted bug in-process (the server runs are `make planted`, docs/reliability.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.planted.bugs import BUGS
from tests.planted.plant import PACKAGE, planted_copy

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(BUGS))
def test_every_bug_still_finds_the_code_it_edits(name, tmp_path):
    """The bug's own edit and each twin (the same bug in another backend's file) find their text
    once, and the planted copy holds exactly those edits."""
    bug = BUGS[name]
    expected = {}
    for edit in bug.edits:
        text = expected.get(edit.file, (PACKAGE / edit.file).read_text())
        assert text.count(edit.old) == 1, f"{name}: {edit.file} changed; update bugs.py"
        expected[edit.file] = text.replace(edit.old, edit.new)
    root = planted_copy(bug, tmp_path) / "dflash_sglang"
    for file, text in expected.items():
        assert (root / file).read_text() == text != (PACKAGE / file).read_text()


def test_the_torch_law_bugs_have_their_kernel_twins():
    """Every bug that edits the target's row law in torch (target_law.row_cut, or row_laws' cut)
    is planted in the CUDA kernel's file too, unless the kernel reads the edited value itself
    (the temperature tensor row_laws hands it); tests/test_row_law_twins.py runs them."""
    law_bugs = {
        n for n, b in BUGS.items() if b.file == "sampling/target_law.py" and "row_cut" in b.new + b.old
    }
    law_bugs |= {n for n, b in BUGS.items() if "ordered[" in b.old}
    assert law_bugs == {"filter_before_temperature", "min_p_wrong_maximum"}
    for name in law_bugs:
        assert {edit.file for edit in BUGS[name].twins} == {"sampling/row_law_triton.py"}, name


def power(*prefix: str) -> dict:
    command = [
        *prefix,
        sys.executable,
        "-m",
        "tests.planted.power",
        "--runs",
        "1",
        "--settings",
        "T1.3 top_k20",
    ]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_judge_catches_a_resample_that_keeps_the_rejected_draft():
    """One engine-free run of test_worker's law case with the bug planted, at one setting (the
    others are `make law-power`'s): its law p-value falls to law_matrix.PASS or below, as the
    server test's would."""
    result = power(sys.executable, "-m", "tests.planted.plant", "no_residual", "--")
    assert result["bug"] == "no_residual"
    assert result["caught"] == 1.0, result
