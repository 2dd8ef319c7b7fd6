"""Plant one bug of bugs.py into a copy of the package and run a command with it first on PYTHONPATH.

    python -m tests.planted.plant no_residual -- python -m pytest \
        "tests/server/test_worker.py::test_the_sampled_law_with_real_filters"

The copy lives in a temporary folder removed afterwards; SGLang's server processes inherit
PYTHONPATH, so the plugin they load is the planted one. `--list` names the bugs (policy_bugs.py's,
sampled_draft_bugs.py's and tree_replay_bugs.py's too: they plant the same way).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dflash_sglang

from .bugs import BUGS, Bug
from .policy_bugs import POLICY_BUGS
from .sampled_draft_bugs import SAMPLED_DRAFT_BUGS
from .tree_replay_bugs import TREE_REPLAY_BUGS

PACKAGE = Path(dflash_sglang.__file__).resolve().parent
PLANTABLE = {**BUGS, **POLICY_BUGS, **SAMPLED_DRAFT_BUGS, **TREE_REPLAY_BUGS}


def planted_copy(bug: Bug, root: Path) -> Path:
    """root/dflash_sglang: the package with `bug` planted; returns root (the PYTHONPATH entry)."""
    target = root / "dflash_sglang"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "assets"))
    (target / "assets").symlink_to(PACKAGE / "assets")
    for edit in bug.edits:  # the bug's own edit, then its twins in other backends' files
        path = target / edit.file
        text = path.read_text()
        if text.count(edit.old) != 1:
            raise ValueError(
                f"{edit.file}: the text to replace is found {text.count(edit.old)} times, not once"
            )
        path.write_text(text.replace(edit.old, edit.new))
    return root


def run_planted(name: str, command: list[str], stdout=None) -> int:
    with tempfile.TemporaryDirectory(prefix=f"planted-{name}-") as folder:
        root = planted_copy(PLANTABLE[name], Path(folder))
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PLANTED_BUG": name, "PYTHONPATH": path}
        return subprocess.call(command, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bug", nargs="?", choices=sorted(PLANTABLE))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list or not args.bug:
        for name, bug in PLANTABLE.items():
            print(f"{name:28s} {bug.paths:14s} {bug.what}")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run_planted(args.bug, command or [sys.executable, "-c", "import dflash_sglang"])


if __name__ == "__main__":
    sys.exit(main())
