"""Tiny pairs whose drafter is a config variant SGLang's built-in DFLASH loads, in the published
on-disk format (the names and shapes of `sglang/srt/models/dflash.py`'s loader), nothing
downloaded. The target is `tiny_dense`'s (same seed, same bytes); only the drafter differs.

- `sinks`: MiMo's extras, `dflash_config.attention_sink_bias` (a sink logit per query head,
  `layers.N.self_attn.attention_sink_bias` [heads]) and `attention_value_scale` 0.5. The sinks are
  drawn wide (about N(1, 2)) so that they change which drafts win, as trained ones do.
- `conv`: grouped convolution, `dflash_config.conv_kernel_size` 3 taps over groups of 16
  channels (`layers.N.{attention,mlp}_conv.base_kernel` [2, 3, hidden] and
  `.kernel_projection.weight` [2 x 3 x groups, hidden]).
- `dflash2`: `architectures: ["DFlash2DraftModel"]` with a candidate selector of rank 8 over the
  top 4 candidates (`candidate_selector.{predecessor,successor}_codebook` [vocab, 8],
  `.hidden_projection.weight` [8, hidden]), `output_multiplier` 1.5 and `final_logit_softcapping`
  20; the codebooks drawn wide so the transitions, not only the LM head's logits, pick the drafts.
- `domino`: `dflash_config.projector_type: "domino"` with `shift_label`, a GRU of 16 and a
  correction of 32 (`prefix_gru.weight_{ih,hh}_l0`, `embed_proj.{0,2}.weight`); the correction's
  output layer drawn wide so that it moves the drafts.
- `laguna`: `architectures: ["DFlashLagunaForCausalLM"]`, `gating: "per-head"` (a softplus gate a
  head, `layers.N.self_attn.g_proj.weight` [heads, hidden]) and `aux_hidden_norms.N.weight`.
Variants combine: `write_variant_pair(out, ("sinks", "conv"))` writes one drafter with both.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .tiny_dense import TinyPair, TinyShape, write_tiny_pair

VARIANTS = {
    "sinks": {"attention_sink_bias": True, "attention_value_scale": 0.5},
    "conv": {"conv_kernel_size": 3, "conv_group_size": 16},
    "dflash2": {
        "selector_rank": 8,
        "selector_top_k": 4,
        "output_multiplier": 1.5,
        "final_logit_softcapping": 20.0,
    },
    "domino": {"domino_gru_dim": 16, "domino_emb_dim": 32, "domino_shift_label": True},
    "laguna": {"laguna": True, "laguna_gating": "per-head"},
}
SINK_MEAN, SINK_STD = 1.0, 2.0
CODEBOOK_STD = 1.5
CORRECTION_STD = 1.0


def write_variant_pair(
    out: str | Path, variants: tuple[str, ...], seed: int = 0, block_size: int = 16,
    shape: TinyShape | None = None, **draft_fields,
) -> TinyPair:  # fmt: skip
    """A tiny pair whose drafter has `variants` (and `draft_fields`, any DFlashConfig field)."""
    fields = {key: value for variant in variants for key, value in VARIANTS[variant].items()} | draft_fields
    pair = write_tiny_pair(out, seed, block_size, shape or TinyShape(), **fields)
    weights = pair.draft / "model.safetensors"
    state = load_file(str(weights))
    generator = torch.Generator().manual_seed(seed + 2)
    for name, tensor in state.items():
        if name.endswith("attention_sink_bias"):
            state[name] = SINK_MEAN + SINK_STD * torch.randn(tensor.shape, generator=generator)
        if name.endswith("_codebook"):
            state[name] = CODEBOOK_STD * torch.randn(tensor.shape, generator=generator)
        if name == "embed_proj.2.weight":
            state[name] = CORRECTION_STD * torch.randn(tensor.shape, generator=generator)
    save_file(state, str(weights), metadata={"format": "pt"})
    return pair
