"""The drafter's training loss: every block of a batch in one drafter forward.

The frozen target runs once over the clean sequences; its selected layers' hidden states become
the drafter's context (fused, then per-layer keys/values, as in KV injection at inference). The
blocks go through drafter/model.py's own layers with an `attend` that applies the training visibility
(blocks.py) on top of each layer's own (window, causality).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from dflash_sglang.drafter.context import target_features
from dflash_sglang.drafter.model import DFlashDraftModel, block_visibility

from .blocks import IGNORE, Blocks


@dataclasses.dataclass
class LossOutput:
    loss: torch.Tensor  # sum(w * CE) / sum(w)
    accuracy: torch.Tensor  # argmax hits among learned positions
    positions: int  # learned positions in the batch


@torch.no_grad()
def target_context(target, input_ids: torch.Tensor, layer_ids) -> torch.Tensor:
    """[b, S, K*D] features of the target layers `layer_ids` (the body only, no LM head)."""
    out = target.base_model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    return target_features(out.hidden_states, layer_ids)


def draft_hidden(draft: DFlashDraftModel, embeds, blocks: Blocks, features: torch.Tensor) -> torch.Tensor:
    """[b, N*B, D] drafter outputs for every block at once."""
    s = features.shape[1]
    context_positions = torch.arange(s, device=features.device).expand(features.shape[0], -1)
    context = draft.fuse_target_features(features.to(embeds.dtype))
    context_kv = draft.context_key_values(context, context_positions)
    key_positions = torch.cat([context_positions, blocks.positions], dim=1)
    masks = {}  # per layer kind (window, causal): the training visibility within the layer's own
    for attn in (layer.self_attn for layer in draft.layers):
        kind = (attn.window, attn.causal)
        if kind not in masks:
            visible = blocks.visible
            if kind != (None, False):  # a full-attention layer sees all of it: nothing to add
                visible = visible & block_visibility(blocks.positions, key_positions, *kind)
            masks[kind] = visible.unsqueeze(1)

    def attend(layer: int, q, k, v):
        attn = draft.layers[layer].self_attn
        # KV heads repeated rather than enable_gqa: CUDA's memory-efficient kernel (masks, no
        # [q, k] scores in memory) does not take grouped heads.
        groups = attn.heads // attn.kv_heads
        keys = torch.cat([context_kv[layer][0], k], dim=1).repeat_interleave(groups, dim=2)
        values = torch.cat([context_kv[layer][1], v], dim=1).repeat_interleave(groups, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            keys.transpose(1, 2),
            values.transpose(1, 2),
            attn_mask=masks[(attn.window, attn.causal)],
            scale=attn.head_dim**-0.5,
        )
        return out.transpose(1, 2).flatten(-2)

    return draft.run_layers(embeds, blocks.positions, attend)


def draft_loss(
    target, draft: DFlashDraftModel, input_ids: torch.Tensor, blocks: Blocks, features=None
) -> LossOutput:
    """`features`: the target's context for `input_ids` when computed beforehand (feature_cache.py)."""
    if features is None:
        features = target_context(target, input_ids, draft.config.target_layer_ids)
    with torch.no_grad():
        embeds = target.get_input_embeddings()(blocks.input_ids)
    hidden = draft_hidden(draft, embeds, blocks, features)
    learn = blocks.labels != IGNORE
    # The LM head only where something is learned: most of a batch's block positions are not.
    logits = target.get_output_embeddings()(hidden[learn]).float()
    labels, weights = blocks.labels[learn], blocks.weights[learn]
    ce = F.cross_entropy(logits, labels, reduction="none")
    return LossOutput(
        loss=(ce * weights).sum() / weights.sum().clamp(min=1e-6),
        accuracy=(logits.argmax(-1) == labels).float().mean() if len(labels) else ce.new_zeros(()),
        positions=len(labels),
    )
