"""A mutation survey of the adaptive verify-width policy (width/): one planted bug a function.

    python -m tests.planted.width_survey [NAME ...]

Each entry of SURVEY is one small edit of one line of width/ (a flipped comparison, an off-by-one,
a dropped term, a wrong key or table, a swapped argument), planted as bugs.py's are (plant.py:
into a temporary copy of the package, first on PYTHONPATH), against the engine-free tests that
read the policy (`policy_tests`: every tests/test_*.py that names `dflash_sglang.width`, `width.`
or tests/width_helpers.py). A bug is `caught` where pytest fails (exit 1), `missed` where the
tests pass (exit 0), `broken` otherwise (the edit does not import or collect: fix its text).
The entries live in width_survey_choosing.py and width_survey_learning.py.
One pytest at a time, OMP_NUM_THREADS=1, each under `timeout 300`; logs go to
/tmp/width_survey_logs/NAME.log. The blind spots are the `missed` rows.

Functions left out (nothing to mutate but the storing of arguments or defaults):
PartialSteps.__init__, PolicyLedger.__init__, AcceptanceProfile.__post_init__,
TreeAcceptanceProfile.__post_init__ (they fill empty lists only; no caller passes them filled)
and TreeAcceptance.verified (a docstring only: trees learn from their walk).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bugs import Bug
from .plant import PACKAGE, planted_copy
from .width_survey_choosing import CHOOSING
from .width_survey_learning import LEARNING

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path("/tmp/width_survey_logs")

# The entries, by what the policy does (width_survey_choosing.py, width_survey_learning.py).
_ENTRIES = {**CHOOSING, **LEARNING}  # name: (function, Bug)
SURVEY: dict[str, Bug] = {name: bug for name, (_, bug) in _ENTRIES.items()}
FUNCTIONS: dict[str, str] = {name: function for name, (function, _) in _ENTRIES.items()}  # where each edit is


def policy_tests() -> list[str]:
    """Every engine-free test file that reads the width policy (tests/server is never one)."""
    pattern = re.compile(r"dflash_sglang\.width|width\.|width_helpers")
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").glob("test_*.py")
        if pattern.search(path.read_text())
    )


def check_texts() -> list[str]:
    """Each edit's text found exactly once in the package (a survey entry that plants nothing is none)."""
    problems = []
    for name, bug in SURVEY.items():
        for edit in bug.edits:
            count = (PACKAGE / edit.file).read_text().count(edit.old)
            if count != 1 or edit.old == edit.new:
                problems.append(f"{name}: {edit.file}: found {count} times")
    return problems


def run(bug: Bug | None, name: str, tests: list[str]) -> tuple[int, float, str]:
    """pytest over `tests` with `bug` planted (None: the package as it is): its exit code, seconds
    and first failing test."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"width-survey-{name}-") as folder:
        path = [str(planted_copy(bug, Path(folder)))] if bug is not None else []
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1",
            "PLANTED_BUG": name,
        }
        check = "import dflash_sglang, sys; sys.stdout.write(dflash_sglang.__file__)"
        where = subprocess.run(
            [sys.executable, "-c", check], env=env, cwd=ROOT, capture_output=True, text=True
        )
        if bug is not None and not where.stdout.startswith(folder):
            raise RuntimeError(f"{name}: the planted copy is not what imports ({where.stdout!r})")
        command = ["timeout", "300", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        command += ["--ignore=tests/server", *tests]
        began = time.monotonic()
        result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        seconds = time.monotonic() - began
    output = result.stdout + result.stderr
    (LOGS / f"{name}.log").write_text(output)
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return result.returncode, seconds, failed.group(1) if failed else ""


def verdict(rc: int) -> str:
    return {0: "missed", 1: "caught"}.get(rc, f"broken (rc {rc})")


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(SURVEY)
    unknown = [name for name in names if name not in SURVEY]
    if unknown:
        print(f"unknown: {unknown}", file=sys.stderr)
        return 2
    problems = check_texts()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    tests = policy_tests()
    print(f"{len(tests)} test files: {' '.join(tests)}", flush=True)
    rc, seconds, _ = run(None, "none", tests)
    if rc != 0:
        print(f"the unplanted package fails the tests (rc {rc}): see {LOGS}/none.log", file=sys.stderr)
        return 2
    print(f"unplanted: pass ({seconds:.0f} s)", flush=True)
    rows = []
    for name in names:
        rc, seconds, failed = run(SURVEY[name], name, tests)
        rows.append((name, SURVEY[name].file, FUNCTIONS[name], verdict(rc), failed))
        print(f"  {name}: {verdict(rc)} ({seconds:.0f} s) {failed}", flush=True)
    print()
    print("name | file | function | result | first failing test")
    print("--- | --- | --- | --- | ---")
    for row in rows:
        print(" | ".join(row))
    counts = {what: sum(row[3].startswith(what) for row in rows) for what in ("caught", "missed", "broken")}
    print(
        f"\n{counts['caught']} caught, {counts['missed']} missed, {counts['broken']} broken, of {len(rows)}"
    )
    return 0 if not counts["broken"] else 1


if __name__ == "__main__":
    sys.exit(main())
