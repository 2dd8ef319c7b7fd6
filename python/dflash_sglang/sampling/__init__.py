"""Acceptance and the target's law: what a verify step keeps, exactly as the target alone would.

    accept.py          greedy and rejection acceptance, batched, no host syncs (engine-free)
    distribution.py    a request's target distribution (temperature, top-k/p, min-p); the
                       TP-safe draft argmax (engine-free)
    target_law.py      per-row cut and normaliser of the filtered law (engine-free)
    row_law_triton.py  the same cut and normaliser on CUDA: one fused Triton kernel, no sort
    accept_triton.py   the acceptance and the final draw as Triton kernels (sampled_accept's, on CUDA)
    sampled_drafts.py  drafts sampled from the request's law over the drafter's logits, and their q
    sampled_verify.py  temperature > 0: exact rejection for point or sampled drafts without
                       [bs, B, V] tensors
    block_verify.py    block verification of sampled drafts (SGLang's flag; engine-free)
    plain_draw.py      a plain step's token (width 1): SGLang's own sampler, as no-spec draws it
    prewarm.py         the startup rehearsal of the sampled verify's and the draw's memory
    verify_logits.py   a request's settings on the verify logits, in the no-spec order
    penalties.py       frequency / presence / repetition / min_new_tokens, exact per position
    simulated_acceptance.py  DFLASH_SGLANG_SIMULATE_ACCEPTANCE: acceptance drawn at set rates
                       (benchmarking only)

May import: errors, environment (its switches), runtime/ (the host-sync guard) and SGLang; the
engine-free modules import only torch, errors and environment.
"""
