"""The Laguna drafter (`architectures: ["DFlashLagunaForCausalLM"]`), as SGLang 0.5.23 defines it
(`DFlashLagunaForCausalLM` in sglang/srt/models/dflash.py): the DFlash drafter with
- a softplus gate on each attention output, from the attention's input (`g_proj`: one gate a
  head, `gating: true` or "per-head", SGLang's default; one an element with "per-element"; none
  with false or "disabled"), applied before `o_proj`;
- an RMSNorm a target feature before `fc` (`aux_hidden_norms.N.weight`);
- the injected context normed by each layer's `input_layernorm` before its keys and values.
Engine-free; the SGLang drafter shards `g_proj` by heads like the queries.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from ..errors import DFlashConfigError

GATINGS = {True: "per-head", "per-head": "per-head", "per-element": "per-element", False: None, None: None,
           "disabled": None}  # fmt: skip


def gating_of(value) -> str | None:
    """SGLang's `normalize_gating`: "per-head", "per-element", or None (no gate)."""
    if value not in GATINGS:
        raise DFlashConfigError(
            f"gating = {value!r}: expected true, false, 'per-head', 'per-element' or 'disabled'"
        )
    return GATINGS[value]


def gate_width(config, heads: int) -> int:
    return heads if config.laguna_gating == "per-head" else heads * config.head_dim


def gated(gate: torch.Tensor, out: torch.Tensor, per_head: bool, heads: int) -> torch.Tensor:
    """The attention output [.., heads * hd] times softplus(gate logits [.., heads or heads * hd])."""
    gate = F.softplus(gate.float()).to(out.dtype)
    if not per_head:
        return out * gate
    return (out.unflatten(-1, (heads, -1)) * gate.unsqueeze(-1)).flatten(-2)


def add_aux_norms(model: nn.Module, config) -> None:
    """`aux_hidden_norms` (one RMSNorm a target feature) on a Laguna drafter, else None."""
    model.aux_hidden_norms = None
    if config.laguna:
        norms = (Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps) for _ in config.target_layer_ids)
        model.aux_hidden_norms = nn.ModuleList(norms)


def normed_features(norms: nn.ModuleList, features: torch.Tensor) -> torch.Tensor:
    """[.., K*D] concatenated target features, each of the K normed by its own RMSNorm."""
    slices = features.unflatten(-1, (len(norms), -1))
    return torch.stack([norm(slices[..., i, :]) for i, norm in enumerate(norms)], dim=-2).flatten(-2)
