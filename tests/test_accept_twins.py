"""The planted bugs of the sampled verify reach its CUDA kernels too (issue 57, item 3).

On CUDA `sampled_accept` takes accept_triton's kernels (the acceptance, the final draw), not the
torch lines the catalogue's acceptance and residual bugs edit, so planted alone they would leave a
GPU run right. Each carries twin edits (tests/planted/bugs.py and sampled_draft_bugs.py `twins`):
the same rule in accept_triton.py or in sampled_verify's kernel branch. CI has no GPU:
sampled_verify_triton_probe.py runs, in a planted copy under Triton's interpreter, `sampled_accept`
through the kernel branch (the torch row law, which test_row_law_twins covers) against the same
call's torch path, on the cases that run the bug. Planted, the two still agree (the same accepted
lengths, the token the inverse CDF of the torch path's final law), and the torch path's answers
differ from the product's: both backends carry the bug, so a law test on a GPU would catch it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.interpreter_probe import run_probe
from tests.planted.bugs import BUGS
from tests.planted.plant import planted_copy
from tests.planted.sampled_draft_bugs import SAMPLED_DRAFT_BUGS
from tests.sampled_verify_triton_probe import torch_answers, twin_cases

PROBE = Path(__file__).with_name("sampled_verify_triton_probe.py")
CASES = {  # bug -> the probe's cases that run its edit (the cards' filter, 48 requests each)
    "no_residual": "point",
    "accept_sqrt_p": "point",
    "accept_p_squared": "point",
    "accept_p_power_0_91": "point;sampled",
    "bonus_wrong_position": "argmax",  # the target's argmax as point drafts: whole blocks
    "sampled_residual_from_p": "sampled;block",
    "sampled_accept_sqrt": "sampled",
    "sampled_q_wrong_position": "sampled;block",
    "ragged_bonus_from_residual": "sampled ragged;block ragged",
    "sampled_accept_p_ignoring_q": "sampled",
    "sampled_accept_ratio_squared": "sampled",
    "sampled_accept_ratio_inverted": "sampled",
}
ALL = {**BUGS, **SAMPLED_DRAFT_BUGS}


def test_every_bug_of_the_sampled_verify_has_an_accept_twin():
    edits_verify = {n for n, b in ALL.items() if b.file == "sampling/sampled_verify.py"}
    assert edits_verify == set(CASES)
    for name in CASES:
        assert ALL[name].twins, name


@pytest.mark.parametrize("bug", sorted(CASES))
def test_planted_the_kernels_carry_the_bug(bug, monkeypatch, tmp_path):
    root = planted_copy(ALL[bug], tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TWIN_CASES", CASES[bug])
    report = run_probe(PROBE, timeout=240)
    changed = 0
    for key, mode, ragged, seed in twin_cases(CASES[bug]):
        r = report[key]
        assert r["accepted_differ"] == 0 and r["prefix_differ"] == 0, (bug, key, r)
        assert r["tokens_differ_off_boundary"] == 0 and r["token_prob_zero"] == 0, (bug, key, r)
        lengths, expected = torch_answers(mode, ragged, seed)  # the product's torch path
        changed += sum(a != b for a, b in zip(lengths + expected, r["lengths"] + r["expected"], strict=True))
    assert changed > 0, bug  # the cases run the bug: the planted torch path answers otherwise
