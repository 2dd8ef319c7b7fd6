"""The operator's signal (width/signal.py): a warning once per move to plain decoding, a line when
drafting comes back, and the gauges `--enable-metrics` exports (tests/server/test_verify_width.py
reads them from a real server's /metrics)."""

from __future__ import annotations

import logging
from collections import Counter

from dflash_sglang.width.signal import WidthSignal


def test_the_move_to_plain_decoding_is_logged_once_and_the_return_too(caplog):
    signal = WidthSignal()
    with caplog.at_level(logging.INFO, logger="dflash_sglang.width.signal"):
        signal.report(Counter({8: 90, 1: 10}), 3.2, 8)
        signal.report(Counter({1: 94, 2: 6}), 0.04, 8)
        signal.report(Counter({1: 95, 2: 5}), 0.03, 8)
        signal.report(Counter({8: 70, 1: 30}), 2.5, 8)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("dflash_sglang: plain decoding on 94% of the last 100 steps")
    assert "accept 0.04 tokens a step at width 8" in lines[0]
    assert caplog.records[0].levelno == logging.WARNING
    assert lines[1].startswith("dflash_sglang: drafting again (plain decoding on 30%")


def test_the_gauges_hold_the_latest_report():
    from prometheus_client import REGISTRY

    signal = WidthSignal(metrics=True, tp_rank=0)
    signal.report(Counter({4: 50, 1: 50}), 1.5, 8)

    def value(name: str) -> float:
        return REGISTRY.get_sample_value(f"dflash_sglang:{name}", {"tp_rank": "0"})

    assert value("verify_width") == 2.5
    assert value("plain_step_share") == 0.5
    assert value("accepted_drafts") == 1.5
