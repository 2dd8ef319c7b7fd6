"""How much of the machine other work took while a level ran, so reports can flag a busy machine.

On CPU the servers' own threads and the client load the machine by themselves, so the load average
says little about interference. This counts the CPU time of every process outside the bench's own
tree (the client and the servers it started) over a level, from /proc (None elsewhere). Processes
that start and end within the level are missed; long-running interference is what skews a run.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def process_table() -> dict[int, tuple[int, float]] | None:
    """pid -> (parent pid, CPU seconds used so far), or None without /proc."""
    if not (PROC / "self" / "stat").is_file():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    table = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # After "pid (comm)": state ppid ... utime is field 14 and stime 15 of the whole line.
        table[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return table


def own_tree(table: dict[int, tuple[int, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


class ForeignCpu:
    """Started before a level; `share()` after it: other processes' CPU time over the machine's."""

    def __init__(self):
        self.before = process_table()

    def share(self, duration_s: float) -> float | None:
        after = process_table()
        if self.before is None or after is None or duration_s <= 0:
            return None
        used = sum(foreign_usage(self.before, after, os.getpid()).values())
        return used / (duration_s * (os.cpu_count() or 1))


def foreign_usage(before: dict, after: dict, root: int) -> dict[int, float]:
    """pid -> CPU seconds used between the two tables, for every process outside root's tree."""
    ours = own_tree(after, root) | own_tree(before, root)
    used = {pid: cpu - before.get(pid, (0, 0.0))[1] for pid, (_, cpu) in after.items() if pid not in ours}
    return {pid: seconds for pid, seconds in used.items() if seconds > 0}
