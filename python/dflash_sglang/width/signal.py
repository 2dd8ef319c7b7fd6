"""What the adaptive width tells an operator (docs/adaptive.md, "The operator's signal").

A drafter whose acceptance collapses (a quantized or mismatched drafter, a load it was not trained
for) makes the policy verify narrow, down to plain decoding; without a word, the server is just
slower than its benchmarks. So at every width report (controller.REPORT_EVERY steps):
- a warning when most of the last steps were plain decoding, once per change, with the drafts'
  recent acceptance, and an info line when drafting comes back;
- under `--enable-metrics`, three gauges beside SGLang's own on `/metrics`: the mean verify width
  of the last steps, their share of plain decoding, and the drafts the server's recent steps
  accepted per step at the widest width (the pooled estimate the policy decides from).
"""

from __future__ import annotations

import logging
from collections import Counter

logger = logging.getLogger(__name__)

# Plain decoding on more than this share of a report's steps: speculation is mostly off.
PLAIN_MOSTLY = 0.5

GAUGES = {
    "verify_width": "dflash_sglang: mean verify width (tokens a request) of the latest steps",
    "plain_step_share": "dflash_sglang: share of the latest steps that were plain decoding (width 1)",
    "accepted_drafts": "dflash_sglang: drafts accepted a step at the widest width, recent pooled estimate",
}


class WidthSignal:
    def __init__(self, metrics: bool = False, tp_rank: int = 0):
        self.plain_mostly = False
        self.gauges = make_gauges(tp_rank) if metrics else None

    def report(self, ran: Counter, accepted_drafts: float, widest: int) -> None:
        """The widths of the last steps (width: steps) and the drafts recently accepted a step."""
        steps = sum(ran.values())
        if not steps:
            return
        plain = ran.get(1, 0) / steps
        mostly = plain > PLAIN_MOSTLY
        if mostly and not self.plain_mostly:
            logger.warning(
                "dflash_sglang: plain decoding on %.0f%% of the last %d steps: the drafts accept %.2f "
                "tokens a step at width %d, too few to pay for drafting at this load",
                100 * plain, steps, accepted_drafts, widest,
            )  # fmt: skip
        elif self.plain_mostly and not mostly:
            logger.info(
                "dflash_sglang: drafting again (plain decoding on %.0f%% of the last %d steps; the "
                "drafts accept %.2f tokens a step at width %d)",
                100 * plain, steps, accepted_drafts, widest,
            )  # fmt: skip
        self.plain_mostly = mostly
        if self.gauges is not None:
            self.gauges["verify_width"].set(sum(w * n for w, n in ran.items()) / steps)
            self.gauges["plain_step_share"].set(plain)
            self.gauges["accepted_drafts"].set(accepted_drafts)


def make_gauges(tp_rank: int) -> dict:
    # Imported here: prometheus_client reads PROMETHEUS_MULTIPROC_DIR (set by SGLang's launcher
    # before the scheduler starts) at import.
    from prometheus_client import Gauge

    gauges = {}
    for name, text in GAUGES.items():
        gauge = Gauge(f"dflash_sglang:{name}", text, labelnames=["tp_rank"], multiprocess_mode="mostrecent")
        gauges[name] = gauge.labels(tp_rank=str(tp_rank))
    return gauges
