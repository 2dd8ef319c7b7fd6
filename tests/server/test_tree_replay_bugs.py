"""A bug of the tree replay planted on a real server (tests/planted/tree_replay_bugs.py) and caught:
each node started from the node before it, as SGLang's chain replay would run a tree. The ring
tree server's greedy test (test_hybrid_tree.py) then differs from the target alone. The other
three bugs and what catches each: docs/reliability.md, "Planted bugs of the tree replay"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GREEDY = "tests/server/test_hybrid_tree.py::test_greedy_equals_the_target_alone_and_the_oracles_steps"


def test_a_tree_replay_reading_a_chain_is_caught_on_a_server():
    command = [sys.executable, "-m", "tests.planted.plant", "tree_replay_reads_a_chain", "--",
               sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
               f"{GREEDY}[ring-plain-extra_buffer-K4-N16]"]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # 1: the test failed
    assert "1 failed" in result.stdout and "AssertionError" in result.stdout, result.stdout[-3000:]
