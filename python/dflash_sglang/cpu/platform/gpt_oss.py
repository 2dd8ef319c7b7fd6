"""Resolution of a gpt-oss (`GptOssForCausalLM`) server on cpu with torch_native attention.

`handle_model_specific_adjustments` refuses gpt-oss on any attention backend but triton,
trtllm_mha, fa3, fa4, ascend, intel_amx, intel_xpu and aiter: in SGLang's words, "torch_native has
neither sliding window nor attention sinks". On CPU tensors it has both: torch_native masks
sliding windows itself, and cpu/kernels/attention.py adds the sinks. So for a `--device cpu` gpt-oss
server whose prefill and decode backends are both torch_native, that step runs with the backend
declared as triton for its duration (the declaration is removed again on exit); that assertion
is the only reader of the attention backend on the gpt-oss path of that step, and every other
decision it makes (the model's override declarations among them) is SGLang's, unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager

ADJUSTMENTS_TARGET = "sglang.srt.arg_groups.model_hook.handle_model_specific_adjustments"
ARCHITECTURE = "GptOssForCausalLM"
SOURCE = "dflash_sglang.cpu.platform.gpt_oss"
CPU_BACKEND = "torch_native"
CHECKED_AS = "triton"  # one of the backends the step accepts


@contextmanager
def declared(server_args, **fields):
    """A temporary resolution declaration of `fields`, removed again on exit."""
    from sglang.srt.arg_groups.overrides import declare_resolution

    declare_resolution(server_args, SOURCE, **fields)
    entry = server_args._resolved_overrides[-1]
    try:
        yield
    finally:
        stash = server_args._resolved_overrides
        del stash[next(i for i, item in enumerate(stash) if item is entry)]


def is_gpt_oss_on_cpu_torch_native(server_args) -> bool:
    from sglang.srt.arg_groups.overrides import (
        attention_backends_of,
        model_config_of,
        resolved_view,
        resolving_view,
    )
    from sglang.srt.connector import ConnectorType, parse_connector_type

    view = resolving_view(server_args)
    if view.device != "cpu" or parse_connector_type(view.model_path) == ConnectorType.INSTANCE:
        return False
    if attention_backends_of(resolved_view(server_args)) != (CPU_BACKEND, CPU_BACKEND):
        return False
    return model_config_of(server_args).hf_config.architectures[0] == ARCHITECTURE


def allow_torch_native_for_gpt_oss_on_cpu(original, server_args):
    """AROUND handle_model_specific_adjustments: see the module docstring."""
    if not is_gpt_oss_on_cpu_torch_native(server_args):
        return original(server_args)
    from sglang.srt.arg_groups.overrides import resolved_view

    view = resolved_view(server_args)
    fields = {"attention_backend": CHECKED_AS}
    for split in ("prefill_attention_backend", "decode_attention_backend"):
        if getattr(view, split):  # set explicitly (to torch_native): checked too
            fields[split] = CHECKED_AS
    with declared(server_args, **fields):
        return original(server_args)
