"""What the adaptive width reports and which testing switches it obeys, each pinned where the width
survey (tests/planted/width_survey.py, docs/reliability.md "Blind spots of width/") found a planted
bug that no test failed: the estimates' log line, the drafts the signal reports, the reports'
window, the switch log's ragged count, each TP rank's gauges, a forced width under attention DP,
and the forced per-request cycle advancing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.width import controller, signal
from dflash_sglang.width.acceptance_profiles import RequestAcceptance, TreeAcceptance
from dflash_sglang.width.controller import REPORT_EVERY, VerifyWidth
from dflash_sglang.width.ranking import Estimate
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV
from dflash_sglang.width.runtime_switch import PolicyLedger


@pytest.fixture
def no_dp_attention(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)  # no SGLang config here
    monkeypatch.delenv(controller.WIDTHS_ENV, raising=False)
    monkeypatch.delenv(FORCED_LENGTHS_ENV, raising=False)


def batch_of(size: int):
    return SimpleNamespace(reqs=[SimpleNamespace(rid=f"r{i}") for i in range(size)])


def test_an_estimate_prints_its_seconds_as_milliseconds():
    assert str(Estimate(4, 4.0, 0.020)) == "4: 4.0 tok / 20.0 ms"


def test_the_signal_reports_accepted_drafts_not_tokens():
    """Every draft of 7 accepted for a long while: the pooled drafts a step approach 7, the bonus
    token not counted."""
    acceptance = RequestAcceptance(7)
    req = SimpleNamespace(rid="r", sampling_params=None, spec_correct_drafts_histogram=[0] * 7 + [500])
    acceptance.profiles([req])
    assert 6.5 < acceptance.recent_accepted_drafts() <= 7.0


def test_a_tree_signal_reports_the_whole_trees_drafts():
    acceptance = TreeAcceptance([1, 2, 4, 8, 16], 7, "cpu")
    for _ in range(200):
        acceptance.pooled.record(15, [0, 1, 3, 5, 7])
    assert acceptance.recent_accepted_drafts() == pytest.approx(acceptance.pooled.means()[-1])
    assert acceptance.recent_accepted_drafts() > 6.5


def test_each_report_covers_only_the_steps_since_the_last(no_dp_attention, monkeypatch):
    monkeypatch.setenv(controller.WIDTHS_ENV, "1,8")
    widths = VerifyWidth(8)
    for _ in range(REPORT_EVERY + 3):
        widths.choose(batch_of(1))
    assert sum(widths.ran.values()) == 3


def test_the_switch_log_counts_only_ragged_steps_as_ragged():
    ledger = PolicyLedger()
    for width, ragged in [(4, False), (4, False), (2, True), (1, False)]:
        ledger.count(width, ragged)
    assert ledger.ragged == 1 and sum(ledger.widths.values()) == 4


def test_each_tp_rank_labels_its_own_gauges(monkeypatch):
    ranks = []
    monkeypatch.setattr(signal, "make_gauges", lambda rank: ranks.append(rank) or {})
    signal.WidthSignal(metrics=True, tp_rank=1)
    assert ranks == [1]


def test_a_forced_width_is_refused_under_attention_dp(monkeypatch):
    """Attention DP ranks verify whole blocks: one forced width is refused at startup, as a cycle is."""
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: True)
    monkeypatch.setenv(controller.WIDTHS_ENV, "4")
    with pytest.raises(DFlashConfigError, match=controller.WIDTHS_ENV):
        controller.forced_widths(8)


def test_the_forced_length_cycle_advances_every_step(no_dp_attention, monkeypatch):
    """Request i of step s verifies pattern[(s + i) % len(pattern)]: each request sees every length."""
    monkeypatch.setenv(FORCED_LENGTHS_ENV, "1,4,8")
    widths = VerifyWidth(8, ragged_off_because=None)
    plans = [widths.choose(batch_of(2)).lengths for _ in range(3)]
    assert plans == [(1, 4), (4, 8), (8, 1)]
