"""Input embeddings in the model's dtype on CPU.

`ModelRunner._extend_forward_kwargs` casts `forward_batch.input_embeds` to bfloat16
unconditionally. DFLASH feeds its draft block as input embeddings, so a float32 model gets
bfloat16-rounded inputs (and a dtype clash in its first matmul). On CPU we cast to the model's
dtype instead and re-apply any embedding replacements in that dtype.
"""

from __future__ import annotations

import torch

TARGET = "sglang.srt.model_executor.model_runner.ModelRunner._extend_forward_kwargs"


def embeds_in_dtype(input_embeds, dtype, replace_embeds=None, replace_positions=None) -> torch.Tensor:
    """input_embeds cast to `dtype`, with rows `replace_positions` set to `replace_embeds`."""
    embeds = input_embeds.to(dtype)
    if replace_embeds is not None and replace_positions is not None:
        embeds[replace_positions] = replace_embeds.to(dtype)
    return embeds


def extend_kwargs_in_model_dtype(original, runner, forward_batch, *args, **kwargs):
    """AROUND _extend_forward_kwargs: CPU input_embeds keep the model's dtype."""
    forward_kwargs = original(runner, forward_batch, *args, **kwargs)
    input_embeds = forward_batch.input_embeds
    if input_embeds is None or input_embeds.device.type != "cpu":
        return forward_kwargs
    forward_kwargs["input_embeds"] = embeds_in_dtype(
        input_embeds, runner.dtype, forward_batch.replace_embeds, forward_batch.replace_positions
    )
    return forward_kwargs
