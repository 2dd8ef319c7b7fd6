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
    bug = BUGS[name]
    original = (PACKAGE / bug.file).read_text()
    assert original.count(bug.old) == 1, f"{name}: {bug.file} changed; update bugs.py"
    planted = (planted_copy(bug, tmp_path) / "dflash_sglang" / bug.file).read_text()
    assert planted == original.replace(bug.old, bug.new) != original


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
