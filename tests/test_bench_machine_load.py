"""The bench's measure of other processes' CPU time (bench/machine_load.py), on this machine's /proc."""

import subprocess
import sys
import time

from dflash_sglang.bench.machine_load import ForeignCpu, own_tree, process_table

SPIN = "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass"


def test_own_tree_follows_parents():
    table = {1: (0, 0.0), 10: (1, 0.0), 11: (10, 0.0), 12: (11, 0.0), 20: (1, 0.0)}
    assert own_tree(table, 10) == {10, 11, 12}


def test_a_child_is_ours_and_an_outsider_is_not():
    assert process_table() is not None  # Linux: /proc
    # A spinning child of this process is the bench's own work: not counted.
    others = ForeignCpu()
    start = time.time()
    subprocess.run([sys.executable, "-c", SPIN], check=True)
    ours = others.share(time.time() - start)
    # A spinner started outside our tree (a new session whose parent exits) is counted.
    outsider = ForeignCpu()
    start = time.time()
    subprocess.run(["setsid", "-f", sys.executable, "-c", SPIN], check=True)
    time.sleep(1.2)
    theirs = outsider.share(time.time() - start)
    assert theirs > ours + 0.15, (ours, theirs)
