"""The planted acceptance rules for sampled drafts (tests/planted/sampled_draft_bugs.py) stay able
to plant, and plant.py plants them (their server runs: docs/reliability.md)."""

from __future__ import annotations

import pytest

from tests.planted.bugs import BUGS
from tests.planted.plant import PACKAGE, PLANTABLE, planted_copy
from tests.planted.policy_bugs import POLICY_BUGS
from tests.planted.sampled_draft_bugs import SAMPLED_DRAFT_BUGS


@pytest.mark.parametrize("name", sorted(SAMPLED_DRAFT_BUGS))
def test_every_sampled_draft_bug_still_finds_the_code_it_edits(name, tmp_path):
    bug = SAMPLED_DRAFT_BUGS[name]
    original = (PACKAGE / bug.file).read_text()
    assert original.count(bug.old) == 1, f"{name}: {bug.file} changed; update sampled_draft_bugs.py"
    planted = (planted_copy(bug, tmp_path) / "dflash_sglang" / bug.file).read_text()
    assert planted == original.replace(bug.old, bug.new) != original


def test_the_sampled_draft_bugs_are_plantable_under_their_own_names():
    assert not set(SAMPLED_DRAFT_BUGS) & (set(BUGS) | set(POLICY_BUGS))
    assert all(PLANTABLE[name] is bug for name, bug in SAMPLED_DRAFT_BUGS.items())
