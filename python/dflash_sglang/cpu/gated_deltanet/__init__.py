"""Stand-ins for the Gated DeltaNet layer's kernels (Qwen3.5/3.6 hybrid targets; installed only
without an accelerator; hooks.py's KERNEL_HOOKS):

    causal_conv1d.py     the depthwise causal conv1d: prefill, decode and verify updates
    delta_rule.py        the gated delta rule in float32: chunked, step by step, per tree node
    chunk_and_decode.py  SGLang's entry points onto it: gating, chunked prefill, packed decode,
                         the recurrent verify with a state per position or per tree node
    elementwise.py       Qwen3.5's fused projections split, gated RMS norm, sigmoid-mul, gates
    replayssm.py         the ReplaySSM spec-verify ring's three kernels (verify, advance, fold);
                         replayssm_math.py: their math in plain torch
    ragged_verify.py     a ragged verify (per-request lengths) through the ring
    tree_replay.py       a draft tree's verify through the ring (records per node, no state per
                         node) and the move of the accepted path's records into chain order for
                         the commit; tree_replay_triton.py: its Triton twin
"""
