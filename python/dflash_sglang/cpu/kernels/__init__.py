"""Stand-ins for the GPU kernels of dense targets and the drafter (installed only without an
accelerator; hooks.py's KERNEL_HOOKS):

    attention.py      torch_native attention: TARGET_VERIFY (chains, trees, ragged rows), the
                      drafter's non-causal block, sliding windows, attention sinks
    mla.py            MLA targets' multi-head prefill form (through attention.py's hook)
    rotary.py         rotary embedding without vllm's custom ops
    embeds.py         input embeddings kept in the model's dtype
    kv_pool.py        KV-pool row moves through SGLang's torch twin
    req_to_token.py   the request -> slot table's writes and reads
    mamba_state.py    row copies and masked scatters between mamba state slots
"""
