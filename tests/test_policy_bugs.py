"""The planted policy bugs (tests/planted/policy_bugs.py) stay able to plant, each names the
engine-free tests that catch it (or, where none can reach its seam, the server tests), and one is
planted here and caught (the rest: docs/reliability.md, "Planted policy bugs", which says how to
run them all)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.planted.bugs import BUGS
from tests.planted.plant import PACKAGE, planted_copy
from tests.planted.policy_bugs import CAUGHT_BY, CAUGHT_ON_A_SERVER, POLICY_BUGS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(POLICY_BUGS))
def test_every_policy_bug_still_finds_the_code_it_edits(name, tmp_path):
    bug = POLICY_BUGS[name]
    original = (PACKAGE / bug.file).read_text()
    assert original.count(bug.old) == 1, f"{name}: {bug.file} changed; update policy_bugs.py"
    planted = (planted_copy(bug, tmp_path) / "dflash_sglang" / bug.file).read_text()
    assert planted == original.replace(bug.old, bug.new) != original


def test_every_policy_bug_names_engine_free_tests_that_exist():
    """Engine-free catchers wherever the seam allows one; a server test only where none can reach it."""
    assert set(CAUGHT_BY) | set(CAUGHT_ON_A_SERVER) == set(POLICY_BUGS) and not set(POLICY_BUGS) & set(BUGS)
    for caught, on_a_server in ((CAUGHT_BY, False), (CAUGHT_ON_A_SERVER, True)):
        for name, nodes in caught.items():
            assert nodes, name
            for node in nodes:
                path, test = node.split("::")
                assert path.startswith("tests/server/") == on_a_server, f"{name}: {node}"
                test = test.split("[")[0]  # a parametrized server's case
                assert f"def {test}(" in (ROOT / path).read_text(), f"{name}: {node} not found"


def run_planted(name: str, node: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tests.planted.plant", name, "--"]
    command += [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_planted_policy_bug_is_caught():
    """The overlap loop's lag: a request's accepted drafts paired with the newest width it was
    verified at instead of the oldest. Every output stays exact; the pairing test fails."""
    name = "lagged_pairing_newest_first"
    (node,) = CAUGHT_BY[name]
    result = run_planted(name, node)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # 1: a test failed
    assert "AssertionError" in result.stdout or "assert" in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize(
    "name",
    [
        "uniform_lengths_verified_ragged",
        "ragged_step_filed_at_the_batch_width",
        "plain_steps_filed_as_drafted",
    ],
)
def test_the_accounting_bugs_are_caught(name):
    """Issue 64's kinds, planted in CI: the layout a plan reaches the target with, and what a step's
    time is filed under (tests/test_policy_accounting.py)."""
    for node in CAUGHT_BY[name]:
        result = run_planted(name, node)
        assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_width_survey_still_finds_the_code_it_edits():
    """tests/planted/width_survey.py: one planted bug in each function of width/ (docs/reliability.md,
    "Blind spots of width/"); each edit must still find its one line, else the survey is stale."""
    from tests.planted.width_survey import SURVEY

    assert len(SURVEY) >= 80
    stale = [name for name, bug in SURVEY.items() if (PACKAGE / bug.file).read_text().count(bug.old) != 1]
    assert not stale, f"update tests/planted/width_survey.py: {stale}"


def test_every_closed_survey_miss_names_a_test_that_exists():
    from tests.planted.width_survey import SURVEY
    from tests.planted.width_survey_closed import CLOSED

    assert len(CLOSED) == 21 and set(CLOSED) <= set(SURVEY)
    for name, node in CLOSED.items():
        path, test = node.split("::")
        assert f"def {test}(" in (ROOT / path).read_text(), f"{name}: {node} not found"


# A sample of the survey's closed misses planted each run, drawn anew from a seed CI prints
# (WIDTH_SURVEY_SEED replays one).
SURVEY_SEED = int(os.environ.get("WIDTH_SURVEY_SEED") or random.SystemRandom().randrange(10**6))


def test_a_sample_of_the_closed_survey_misses_is_caught(tmp_path, capsys):
    from tests.planted.width_survey import SURVEY
    from tests.planted.width_survey_closed import CLOSED

    sample = random.Random(SURVEY_SEED).sample(sorted(CLOSED), 4)
    with capsys.disabled():  # in CI's log whatever the outcome
        print(f"\nwidth survey misses planted: {sample} (WIDTH_SURVEY_SEED={SURVEY_SEED})")
    missed = []
    for name in sample:
        root = planted_copy(SURVEY[name], tmp_path / name)
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", CLOSED[name]]
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        if result.returncode != 1:  # 1: a test failed
            missed.append(f"{name} (exit {result.returncode}): {result.stdout[-1500:]}")
    assert not missed, f"WIDTH_SURVEY_SEED={SURVEY_SEED}: " + "; ".join(missed)
