"""The bench's measure of other processes' CPU time (bench/machine_load.py), on this machine's /proc."""

import os
import signal
import subprocess
import sys

from dflash_sglang_tools.bench.machine_load import foreign_usage, own_tree, process_table

# Burns half a CPU second of its own (however busy the machine), says so, then idles until killed.
SPIN = """import os, time
while time.process_time() < 0.5: pass
print(os.getpid(), flush=True)
time.sleep(120)"""


def test_own_tree_follows_parents():
    table = {1: (0, 0.0), 10: (1, 0.0), 11: (10, 0.0), 12: (11, 0.0), 20: (1, 0.0)}
    assert own_tree(table, 10) == {10, 11, 12}


def spin(*launcher: str) -> tuple[int, subprocess.Popen]:
    """(the spinner's pid, its launcher) once the spinner has burnt its CPU time."""
    launched = subprocess.Popen([*launcher, sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    return int(launched.stdout.readline()), launched


def test_a_child_is_ours_and_an_outsider_is_not():
    """Attribution per process, so the check holds on a loaded machine: the bench's own child is
    never counted, a process outside its tree is counted with the CPU time it burnt."""
    before = process_table()
    assert before is not None  # Linux: /proc
    child, child_launch = spin()
    outsider, outsider_launch = spin("setsid", "-f")  # forked into its own session: init's child
    try:
        usage = foreign_usage(before, process_table(), os.getpid())
    finally:
        for pid in (child, outsider):
            os.kill(pid, signal.SIGKILL)
        child_launch.wait(), outsider_launch.wait()
    assert child not in usage
    assert usage.get(outsider, 0.0) >= 0.45, usage.get(outsider)
