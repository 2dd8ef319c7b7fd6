"""The step record (step/step_record.py) the server tests read what reached the target from: off
unless asked for, and a line a step holding the policy's choice, the lengths it recorded each
request's acceptance against, the verify input the target was handed and what each request
committed (tests/server/step_records.py checks them on real servers)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from dflash_sglang.runtime.step_plan import StepPlan
from dflash_sglang.step.step_record import RECORD_ENV, step_record


def policy():
    """A width policy's face as the record reads it; its acceptance's `verified` keeps its calls."""
    calls = []
    acceptance = SimpleNamespace(verified=lambda reqs, width, lengths=None: calls.append((width, lengths)))
    ledger = SimpleNamespace(fixed_width=None)
    widths = SimpleNamespace(acceptance=acceptance, ledger=ledger, per_request=True)
    return widths, calls


def test_off_unless_asked_for(monkeypatch):
    monkeypatch.delenv(RECORD_ENV, raising=False)
    assert step_record(policy()[0], 0) is None


def test_a_ragged_step_line_and_a_whole_one(monkeypatch, tmp_path):
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "steps"))
    widths, calls = policy()
    record = step_record(widths, tp_rank=1)
    batch = SimpleNamespace(reqs=[SimpleNamespace(rid="a"), SimpleNamespace(rid="b")])
    widths.acceptance.verified(batch.reqs, 3, (3, 1))  # the policy pairs its acceptance ...
    assert calls == [(3, (3, 1))]  # ... and the policy's own call still happens
    layout = SimpleNamespace(verify_lens_cpu=(3, 1))
    record.target_forward(SimpleNamespace(ragged_verify_layout=layout, draft_token_num=3), 2)
    record.step(batch, StepPlan(3, True, (3, 1)), torch.tensor([2, 1], dtype=torch.int32))
    # a whole step of width 2, nothing recorded by the policy
    record.target_forward(SimpleNamespace(ragged_verify_layout=None, draft_token_num=2), 2)
    record.step(batch, StepPlan(2, False), torch.tensor([1, 2], dtype=torch.int32))
    lines = [json.loads(line) for line in (tmp_path / "steps.tp1.jsonl").read_text().splitlines()]
    assert lines == [
        {
            "rids": ["a", "b"],
            "chose": {"width": 3, "lengths": [3, 1], "fixed_width": None, "per_request": True},
            "recorded": [3, 1],
            "target": {"layout": "ragged", "lengths": [3, 1]},
            "accepted": [2, 1],
        },
        {
            "rids": ["a", "b"],
            "chose": {"width": 2, "lengths": None, "fixed_width": None, "per_request": True},
            "recorded": None,
            "target": {"layout": "whole", "lengths": [2, 2]},
            "accepted": [1, 2],
        },
    ]
