"""The verify policy switched on a running server, through SGLang's `/set_internal_state`:

    curl -X POST http://127.0.0.1:30000/set_internal_state -H 'Content-Type: application/json' \\
        -d '{"server_args": {"dflash_verify_width": 8}}'

Two switches, as the environment's (SGLang takes numbers only there):
- `dflash_verify_width`: N (1 to the block, or a tree's N nodes), every step verifies N, as a
  server started with `DFLASH_SGLANG_VERIFY_WIDTHS=N`: the block is whole blocks, as
  `DFLASH_SGLANG_ADAPTIVE_WIDTH=0`, a tree's budgets nest (tree/budgets.py), so N nodes of a wider
  tree are the fixed tree of N; the adaptive width neither chooses nor times (what the steps
  accept, it learns as before). 0: what the server started with again;
- `dflash_request_lengths`: 0, one width a batch, as `DFLASH_SGLANG_REQUEST_LENGTHS=0`; 1, each
  request its own length (where the adaptive width runs and the path can verify them).

Like SGLang's `dspark_force_budget_frac` for its DSPARK worker: an operator's fallback without a
restart, and what lets a benchmark compare policies inside one server process
(dflash_sglang_tools/bench/one_process.py), where the process's own speed, which moved by 20-30%
between launches of the same server on CPU, is the same for both. What the adaptive width has
learned stays through a switch. SGLang answers `{"updated": false}` to a value it cannot take and
logs why; every rank's scheduler receives the request; each switch logs what ran under the last.
"""

from __future__ import annotations

import logging
from collections import Counter

from ..runtime import dp_attention

logger = logging.getLogger(__name__)

WIDTH, LENGTHS = "dflash_verify_width", "dflash_request_lengths"
TARGET = (
    "sglang.srt.managers.scheduler_components.internal_state."
    "SchedulerInternalStateController._update_handlers"
)


def refusal(key: str, value, widths) -> str | None:
    """Why this server's `widths` (width/controller.VerifyWidth) cannot take `key` = `value`,
    or None where it can."""
    if widths.pattern or widths.forced_lengths:
        return f"{key}: this server forces its widths (a testing cycle)"
    if key == WIDTH:
        if value not in range(widths.widest + 1):
            return f"{key}={value!r}: expected 0 (the server's own policy) or a width in 1..{widths.widest}"
        if value not in (0, widths.widest) and dp_attention.enabled():
            return f"{key}={value}: under attention DP every step verifies the whole block"
        return None
    if value not in (0, 1):
        return f"{key}={value!r}: expected 0 (off) or 1 (on)"
    if value and (not widths.adaptive or widths.ragged_off_because is not None):
        return f"{key}=1: this server cannot verify per-request lengths (its startup line says why)"
    return None


class PolicyLedger:
    """The switches in force, and the steps that ran under them (logged at the next switch)."""

    def __init__(self):
        self.fixed_width: int | None = None  # dflash_verify_width, where set
        self.widths, self.ragged = Counter(), 0

    def count(self, width: int, ragged: bool) -> None:
        self.widths[width] += 1
        self.ragged += ragged

    def switched(self, key: str, value: int) -> None:
        logger.info(
            "dflash_sglang: %s=%d from the next step (before it: %d steps, widths %s, %d of them ragged)",
            key, value, sum(self.widths.values()), dict(sorted(self.widths.items())), self.ragged,
        )  # fmt: skip
        self.widths.clear()
        self.ragged = 0


def add_handlers(original, controller):
    """AROUND SGLang's `_update_handlers`: our keys beside SGLang's own, where our worker serves."""
    from sglang.srt.managers.scheduler_components.internal_state import UpdateRejected, _UpdateHandler

    handlers = original(controller)
    widths = getattr(controller.scheduler.draft_worker, "widths", None)
    if widths is None or not hasattr(widths, "switch"):
        return handlers

    def validate(key, value) -> None:
        reason = refusal(key, value, widths)
        if reason is not None:
            raise UpdateRejected(reason)

    for key in (WIDTH, LENGTHS):
        handlers[key] = _UpdateHandler(validate, widths.switch)
    return handlers
