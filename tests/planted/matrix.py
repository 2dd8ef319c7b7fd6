"""Every planted bug against the law tests of the paths it reaches, on real servers: a table.

    python -m tests.planted.matrix [--bugs a,b] [--paths chain-sampled,tp2]

For each (bug, path the bug reaches) it runs that path's law test with the bug planted (plant.py)
and prints whether it failed on the law (with the worst p-values), failed otherwise (a crash or
another assertion), or passed (the bug was missed); the bug `none` runs the test unplanted, where
it must pass. Logs go to out/planted/. `make planted` runs it all (two to four minutes a cell on
this machine); docs/reliability.md keeps the table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from .bugs import BUGS
from .plant import PLANTABLE, run_planted

CHAIN = "tests/server/test_worker.py::test_the_sampled_law_with_real_filters"
LAW_TESTS = {
    "chain-sampled": f"{CHAIN}[sampled-overlap]",
    "chain-point": f"{CHAIN}[point-plain]",
    "tp2": "tests/server/test_tp.py::test_the_sampled_law_at_tp2_on_the_trained_pair",
    "tree": "tests/server/test_tree.py::test_the_sampled_law_of_a_tree_on_the_trained_pair",
    "hybrid": "tests/server/test_hybrid_worker.py::test_the_sampled_law_with_power_through_state_commits",
    "ragged": "tests/server/test_verify_width.py::"
    "test_the_sampled_law_with_real_filters_across_forced_request_lengths",
    "ragged-block": "tests/server/test_sampled_drafts.py::"
    "test_block_verification_keeps_the_law_and_greedy_stays_exact",
    "dflash2": "tests/server/test_sampled_drafts.py::"
    "test_a_trained_dflash2_drafter_samples_its_walk_keeps_the_law_and_greedy_stays_exact",
}
REACHES = {
    "chain": ("chain-point", "hybrid"),
    "sampled chain": ("chain-sampled", "tp2", "ragged", "dflash2"),
    "tree": ("tree",),
    "hybrid": ("hybrid",),
    "ragged": ("ragged", "ragged-block"),
}


def pytest_command(test: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test]


def outcome(code: int, log: str) -> str:
    """What the law test did, with the worst setting's words when it failed on the law."""
    if code == 0:
        return "passes"
    for line in log.splitlines():
        if "must be >" in line:
            return "fails: " + line.split("AssertionError: ", 1)[-1].strip()[:400]
    return "fails (no law verdict: a crash or another assertion)"


def run_cell(bug: str | None, test: str, log_path: Path) -> str:
    command = pytest_command(test)
    with open(log_path, "w") as log:
        if bug is None:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
        else:
            code = run_planted(bug, command, stdout=log)
    return outcome(code, log_path.read_text())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bugs", default=",".join(BUGS), help="'none' runs a test unplanted")
    parser.add_argument("--paths", default=",".join(LAW_TESTS))
    parser.add_argument("--logs", type=Path, default=Path("out/planted"))
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    print("| bug | path | law test | seconds |\n|---|---|---|---|", flush=True)
    for bug in args.bugs.split(","):
        for path in args.paths.split(","):
            planted = None if bug == "none" else bug
            if planted and not any(path in REACHES[p.strip()] for p in PLANTABLE[planted].paths.split(",")):
                continue
            start = time.monotonic()
            result = run_cell(planted, LAW_TESTS[path], args.logs / f"{bug}-{path}.log")
            print(f"| {bug} | {path} | {result} | {time.monotonic() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
