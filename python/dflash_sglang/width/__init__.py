"""The verify width (docs/adaptive.md): how much of each drafted block, or how many tree nodes, a
step verifies, and the load-adaptive policy that chooses it.

    verify_width.py          the step's width: forced cycle, adaptive choice, narrowing the block
    policy.py                expected committed tokens per second over widths (engine-free)
    request_lengths.py       per-request lengths: each request's own width, one ragged verify
                             (engine-free)
    observations.py          what the policy learns: acceptance per request, step cost per width
    partial_steps.py         what a ragged step drafting part of the batch costs (its fixed share)
    signal.py                what the width tells an operator (log line, metrics)
    runtime_policy.py        the policy switched on a running server (`/set_internal_state`)
    simulated_acceptance.py  DFLASH_SGLANG_SIMULATE_ACCEPTANCE: acceptance drawn at set rates
                             (benchmarking only)

May import: errors, environment, runtime/, sampling/, tree/ (tree budgets as widths) and SGLang.
"""
