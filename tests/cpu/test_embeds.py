"""Input embeddings in the model dtype (cpu/kernels/embeds.py): SGLang's _extend_forward_kwargs casts
them to bfloat16, which would round a float32 draft block."""

from types import SimpleNamespace

import torch

from dflash_sglang.cpu.kernels.embeds import extend_kwargs_in_model_dtype


def sglang_like(runner, forward_batch, pp_proxy_tensors):
    """What SGLang's _extend_forward_kwargs returns for input_embeds (the bfloat16 cast)."""
    kwargs = {"pp": pp_proxy_tensors}
    if forward_batch.input_embeds is not None:
        kwargs["input_embeds"] = forward_batch.input_embeds.bfloat16()
    return kwargs


def batch(embeds, replace_embeds=None, replace_positions=None):
    return SimpleNamespace(
        input_embeds=embeds, replace_embeds=replace_embeds, replace_positions=replace_positions
    )


def test_float32_embeddings_stay_exact():
    embeds = torch.randn(6, 8) * 1.2345678
    kwargs = extend_kwargs_in_model_dtype(
        sglang_like, SimpleNamespace(dtype=torch.float32), batch(embeds), "pp"
    )
    assert kwargs["pp"] == "pp"
    assert kwargs["input_embeds"].dtype == torch.float32
    assert torch.equal(kwargs["input_embeds"], embeds)
    assert not torch.equal(embeds.bfloat16().float(), embeds)  # the cast we undo does lose bits


def test_replacements_land_in_the_model_dtype():
    embeds = torch.zeros(5, 4)
    replace = torch.randn(2, 4, dtype=torch.float64)
    kwargs = extend_kwargs_in_model_dtype(
        sglang_like, SimpleNamespace(dtype=torch.float32), batch(embeds, replace, torch.tensor([1, 3])), None
    )
    out = kwargs["input_embeds"]
    assert out.dtype == torch.float32
    assert torch.equal(out[[1, 3]], replace.float())
    assert not out[[0, 2, 4]].any()


def test_no_embeddings_or_other_devices_keep_sglang_kwargs():
    runner = SimpleNamespace(dtype=torch.float32)
    assert extend_kwargs_in_model_dtype(sglang_like, runner, batch(None), None) == {"pp": None}
    meta = torch.empty(3, 4, device="meta")
    kwargs = extend_kwargs_in_model_dtype(sglang_like, runner, batch(meta), None)
    assert kwargs["input_embeds"].dtype == torch.bfloat16
