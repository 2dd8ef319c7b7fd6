"""Every planted bug against the law tests of the paths it reaches, on real servers: a table.

    python -m tests.planted.matrix [--bugs a,b] [--paths chain-overlap,tp2]

For each (bug, path) it runs that path's law test with the bug planted (plant.py) and records
whether the test failed on the law (caught), failed otherwise (a crash counts as caught, and is
said), or passed (missed); unplanted, each test must pass. `make planted` runs it all (about two
minutes a cell on this machine); docs/reliability.md keeps the table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from .bugs import BUGS
from .plant import run_planted

CHAIN = "tests/server/test_worker.py::test_the_sampled_law_with_real_filters"
LAW_TESTS = {
    "chain-overlap": f"{CHAIN}[env0-chain, overlap worker]",
    "chain-plain": f"{CHAIN}[env1-chain, plain worker]",
    "tp2": "tests/server/test_tp.py::test_the_sampled_law_at_tp2_on_the_trained_pair",
    "tree": "tests/server/test_tree.py::test_the_sampled_law_of_a_tree_on_the_trained_pair",
    "hybrid": "tests/server/test_hybrid_worker.py::"
    "test_the_sampled_law_with_real_filters_through_state_commits[overlap-extra_buffer-radix-b8]",
}
REACHES = {"chain": ("chain-overlap", "chain-plain", "tp2"), "tree": ("tree",), "hybrid": ("hybrid",)}


def pytest_command(test: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]


def outcome(code: int, log: str) -> str:
    if code == 0:
        return "missed"
    return "caught" if "must be >" in log or "tokens outside the filter" in log else "caught (crash)"


def run_cell(bug: str | None, test: str) -> tuple[str, float]:
    start = time.monotonic()
    command = pytest_command(test)
    if bug is None:
        result = subprocess.run(command, capture_output=True, text=True)
        code, log = result.returncode, result.stdout + result.stderr
        return ("passes" if code == 0 else "FAILS unplanted"), time.monotonic() - start
    with open(f"/tmp/planted-{bug}.log", "w") as log_file:
        code = run_planted(bug, command, stdout=log_file)
    with open(f"/tmp/planted-{bug}.log") as log_file:
        log = log_file.read()
    return outcome(code, log), time.monotonic() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bugs", default=",".join(BUGS))
    parser.add_argument("--paths", default=",".join(LAW_TESTS))
    parser.add_argument("--unplanted", action="store_true", help="also run each test unplanted")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    print("| bug | " + " | ".join(paths) + " |")
    print("|---" * (len(paths) + 1) + "|")
    rows = ([None] if args.unplanted else []) + args.bugs.split(",")
    for bug in rows:
        cells = []
        for path in paths:
            reached = bug is None or any(path in REACHES[p.strip()] for p in BUGS[bug].paths.split(","))
            cells.append(run_cell(bug, LAW_TESTS[path]) if reached else ("(not on this path)", 0.0))
        text = " | ".join(f"{what} ({seconds:.0f} s)" if seconds else what for what, seconds in cells)
        print(f"| {bug or 'none'} | {text} |", flush=True)


if __name__ == "__main__":
    main()
