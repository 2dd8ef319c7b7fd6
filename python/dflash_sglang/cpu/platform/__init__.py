"""What lets a cpu server start and run its processes (hooks.py's PLATFORM_HOOKS, installed on
every host; each passes an accelerator's calls through):

    checks.py           DFLASH (and block verification) admitted on `--device cpu`, its draft
                        attention backend kept torch_native
    no_accelerator.py   pinning, synchronize and host registration answered without an
                        accelerator; record_stream.py: a no-op for CPU tensors
    fork_launch.py      forked server subprocesses (opt-in, faster starts)
    gpt_oss.py          gpt-oss resolution with torch_native attention
    mamba_policy.py     the extra_buffer mamba strategy allowed on cpu
    collectives.py      TP over gloo (no PyNccl on gloo groups)
    dp_padding.py       attention DP's padding and copies; dp_controller.py: its idle loop
    disaggregation.py   PD on cpu: host page indices, no early prefix send
"""
