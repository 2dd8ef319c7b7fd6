"""The planted bugs of the target's row law reach the CUDA kernel too (issue 57, item 3).

The sampling catalogue's bugs that edit the torch row law (tests/planted/bugs.py:
filter_before_temperature, min_p_wrong_maximum) carry a twin edit of sampling/row_law_triton.py,
planted with them; draft_temperature_off edits the temperature row_laws hands both branches, so
it needs none. CI has no GPU: row_law_twin_probe.py runs `row_laws` through both branches under
Triton's interpreter on CPU, in the product or in a planted copy, and this test compares each
branch's law (p over the vocabulary, from its cut, log_norm and temperature) with the product's
torch law. Unplanted, the kernel's law is the torch law. Planted, the kernel's law is off by a
total variation the law tests see, and it is the planted torch path's law: both backends carry
the same bug, so a law test run on a GPU would catch it as it does on CPU.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from tests.interpreter_probe import run_probe
from tests.planted.bugs import BUGS
from tests.planted.plant import planted_copy
from tests.row_law_twin_probe import batch, laws

PROBE = Path(__file__).with_name("row_law_twin_probe.py")
LAW_BUGS = ["draft_temperature_off", "filter_before_temperature", "min_p_wrong_maximum"]


def probabilities(law: dict) -> torch.Tensor:
    """[rows, V] p(x) = exp(s_x - log_norm) on s >= cut, s = logits / temperature."""
    logits, _ = batch()
    scaled = logits / torch.tensor(law["temperature"]).unsqueeze(-1)
    cut, norm = torch.tensor(law["cut"]).unsqueeze(-1), torch.tensor(law["log_norm"]).unsqueeze(-1)
    return torch.where(scaled >= cut, (scaled - norm).exp(), 0.0)


def distance(a: dict, b: dict) -> torch.Tensor:
    """[rows] total variation between two row laws."""
    return 0.5 * (probabilities(a) - probabilities(b)).abs().sum(-1)


@pytest.fixture(scope="module")
def product_law() -> dict:
    return laws(())  # the product's torch passes, in this process


def probe(monkeypatch, tmp_path, bug: str | None, twins: bool = True) -> dict:
    if bug is not None:  # the planted copy first on PYTHONPATH, as plant.py runs a command
        planted = BUGS[bug] if twins else dataclasses.replace(BUGS[bug], twins=())
        root = planted_copy(planted, tmp_path)
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        )
    return run_probe(PROBE, timeout=240)


def test_unplanted_the_kernel_keeps_the_torch_law(monkeypatch, tmp_path, product_law):
    report = probe(monkeypatch, tmp_path, None)
    assert distance(report["torch"], product_law).max() == 0
    assert distance(report["kernel"], product_law).max() < 1e-5


@pytest.mark.parametrize("bug", LAW_BUGS)
def test_a_planted_law_bug_reaches_the_kernel(monkeypatch, tmp_path, product_law, bug):
    report = probe(monkeypatch, tmp_path, bug)
    off_torch = distance(report["torch"], product_law)
    off_kernel = distance(report["kernel"], product_law)
    assert off_torch.max() > 0.02, off_torch  # the bug changes the torch law ...
    assert off_kernel.max() > 0.02, off_kernel  # ... and the kernel's: a law test catches both
    assert (off_kernel > 1e-4).sum() >= 3, off_kernel  # on several rows, not one
    # The twin is the same bug: the kernel's law is the planted torch path's law.
    assert distance(report["kernel"], report["torch"]).max() < 1e-3


@pytest.mark.parametrize("bug", ["filter_before_temperature", "min_p_wrong_maximum"])
def test_without_its_twin_the_bug_would_miss_the_kernel(monkeypatch, tmp_path, product_law, bug):
    """Why the twins exist: the torch edit alone leaves the kernel's law the product's."""
    report = probe(monkeypatch, tmp_path, bug, twins=False)
    assert distance(report["torch"], product_law).max() > 0.02
    assert distance(report["kernel"], product_law).max() < 1e-5
