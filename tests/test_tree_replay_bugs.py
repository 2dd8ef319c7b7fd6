"""The planted bugs of a tree through the ReplaySSM ring (tests/planted/tree_replay_bugs.py) stay
able to plant, under their own names; tests/server/test_tree_replay_bugs.py plants one on a server."""

from __future__ import annotations

import pytest

from tests.planted.plant import PACKAGE, PLANTABLE, planted_copy
from tests.planted.tree_replay_bugs import TREE_REPLAY_BUGS


@pytest.mark.parametrize("name", sorted(TREE_REPLAY_BUGS))
def test_every_tree_replay_bug_still_finds_the_code_it_edits(name, tmp_path):
    bug = TREE_REPLAY_BUGS[name]
    original = (PACKAGE / bug.file).read_text()
    assert original.count(bug.old) == 1, f"{name}: {bug.file} changed; update tree_replay_bugs.py"
    planted = (planted_copy(bug, tmp_path) / "dflash_sglang" / bug.file).read_text()
    assert planted == original.replace(bug.old, bug.new) != original


def test_the_tree_replay_bugs_are_plantable_under_their_own_names():
    assert all(PLANTABLE[name] is bug for name, bug in TREE_REPLAY_BUGS.items())
