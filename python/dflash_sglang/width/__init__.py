"""The verify width (docs/adaptive.md): how much of each drafted block, or how many tree nodes, a
step verifies, and the load-adaptive policy that chooses it.

The controller:
    controller.py           the step's width: the widest, a forced cycle, or the adaptive choice
The policy's models (engine-free but for step_times.py's CUDA events):
    acceptance_profiles.py  what drafts each request is expected to accept, chains and trees
    step_cost.py            what a step costs by batch size and width (the cost model), and a
                            ragged step drafting part of the batch
    step_times.py           the step times behind the cost model, as steps finish
    ranking.py              the widths ranked by expected committed tokens per second
    request_lengths.py      per-request lengths: each request's own width, one ragged verify
    plain_hold.py           a ranking that chose plain decoding, held a few steps (its cost)
The operator's side:
    signal.py               what the width tells an operator (log line, metrics)
    runtime_switch.py       the policy switched on a running server (`/set_internal_state`)

May import: errors, environment, runtime/, sampling/, tree/ (tree budgets as widths) and SGLang.
"""
