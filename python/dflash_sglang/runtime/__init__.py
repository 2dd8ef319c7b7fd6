"""What every phase of the step shares with SGLang's runtime, below the phases themselves.

    block.py         the step's Block (tokens, positions, KV slots), its KV plan, and `narrow`:
                     its first w positions a request, for a verify of width w
    step_plan.py     StepPlan: the width policy's decision for one step (width, each request's
                     length, tree budget), a value the block carries from drafting to verifying
    spec_info.py     DFlashDraftState: the per-batch state SGLang carries between steps
    host_sync.py     DFLASH_SGLANG_CHECK_HOST_SYNC: fail any step that reads device data on the host
    host_copies.py   device -> host copies read a step later, without a sync
    streams.py       the drafter's CUDA stream (overlap worker)
    dp_attention.py  --enable-dp-attention: an idle rank's IDLE verify, metadata after DP padding
    visibility.py    which keys a drafter block's queries see (the drafter's and cpu/'s attention)

May import: errors, environment and SGLang (visibility.py: torch only). Everything above (cpu/,
sampling/, tree/, drafter/, width/, step/, the worker) may import it.
"""
