"""What reached the target, one JSON line a decode step, for the server tests (testing only).

The verify policy's bugs keep every output exact (the target verifies what it is given), so a
server test sees them only by reading what each step handed the target. With
`DFLASH_SGLANG_STEP_RECORD=<path>`, each TP rank appends to `<path>.tp<rank>.jsonl`, a line a
decode step:

    rids      the batch's requests, in order
    chose     what the width policy chose (the step's plan, runtime/step_plan.py): the width, each
              request's length (null: one width for all), the runtime switches in force
    recorded  the length the policy recorded each request's acceptance against (the lengths passed
              to its acceptance's `verified`; null where it recorded none this step)
    target    the verify forward's input, read where step/verifying.py builds it: its layout
              (`ragged` or `whole`) and each request's verified length
    accepted  the tokens each request committed (the commit's accept lengths)

tests/server/step_records.py reads them. Off (the default), the step pays one `None` check.
"""

from __future__ import annotations

import json

from ..environment import STEP_RECORD
from ..runtime import host_sync
from ..runtime.step_plan import StepPlan

RECORD_ENV = STEP_RECORD.name


def step_record(widths, tp_rank: int) -> StepRecord | None:
    """This rank's record where the switch asks for one, else None."""
    path = STEP_RECORD.value()
    return StepRecord(f"{path}.tp{tp_rank}.jsonl", widths) if path else None


class StepRecord:
    def __init__(self, path: str, widths):
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 - the server's lifetime, a line a step
        self.widths = widths
        self.recorded: list[int] | None = None
        self.target: dict | None = None
        if widths.acceptance is not None and hasattr(widths.acceptance, "verified"):
            self.watch_verified(widths.acceptance)

    def watch_verified(self, acceptance) -> None:
        """Keep what the policy passes its acceptance's `verified` (a chain's pairing), then pass it on."""
        verified = acceptance.verified

        def recording(reqs, width, lengths=None):
            self.recorded = [int(width)] * len(reqs) if lengths is None else [int(n) for n in lengths]
            return verified(reqs, width, lengths)

        acceptance.verified = recording

    def target_forward(self, verify_input, batch_size: int) -> None:
        """The verify input step/verifying.py hands the target (after ragged packing, if any)."""
        layout = verify_input.ragged_verify_layout
        if layout is None:
            self.target = {"layout": "whole", "lengths": [int(verify_input.draft_token_num)] * batch_size}
        else:
            self.target = {"layout": "ragged", "lengths": [int(n) for n in layout.verify_lens_cpu]}

    def one_token_each(self, batch_size: int) -> None:
        """A plain step's DECODE forward (step/plain_forward.py): one width, 1."""
        self.target = {"layout": "whole", "lengths": [1] * batch_size, "decode": True}

    def step(self, batch, plan: StepPlan, accept_lens) -> None:
        """The step's line, once its commit has produced `accept_lens`; `plan`: the policy's choice."""
        widths = self.widths
        chose = {
            "width": int(plan.width),
            "lengths": None if plan.lengths is None else list(plan.lengths),
            "fixed_width": widths.ledger.fixed_width,
            "per_request": bool(widths.per_request),
        }
        with host_sync.allowed("DFLASH_SGLANG_STEP_RECORD: a test's record of the step"):
            accepted = [int(n) for n in accept_lens.tolist()]
        line = {
            "rids": [req.rid for req in batch.reqs],
            "chose": chose,
            "recorded": self.recorded,
            "target": self.target,
            "accepted": accepted,
        }
        self.file.write(json.dumps(line) + "\n")
        self.recorded = self.target = None
