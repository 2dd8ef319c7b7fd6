"""Train a DFlash drafter against a frozen transformers causal-LM target (the recipe).

The target's embedding and LM head are shared and frozen; only the drafter's layers, `fc` and
norms learn. Anchors are redrawn for every batch (a fresh augmentation each epoch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from dflash_sglang.drafter.config import FULL_ATTENTION, DFlashConfig, default_target_layer_ids
from dflash_sglang.drafter.model import DFlashDraftModel

from .blocks import default_gamma, make_blocks, sample_anchors
from .data import Batch, Example, epoch_batches
from .evaluate import acceptance
from .loop import Schedule, fit
from .loss import draft_loss


@dataclasses.dataclass
class DrafterRecipe:
    block_size: int = 8
    anchors: int = 512  # per sequence at block_size, at most (bounded by its response tokens)
    gamma: float | None = None  # None: the paper's value for each block size
    # Steps cycle through these block sizes (default: block_size only). The drafter attends
    # across its whole block, so one trained at 8 alone drafts worse at 4 or 16; mixing sizes
    # keeps it good at every --speculative-num-draft-tokens. Anchors scale to keep the tokens.
    train_block_sizes: tuple[int, ...] = ()
    tokens_per_batch: int = 8192  # padded target tokens per batch
    seed: int = 0
    schedule: Schedule = dataclasses.field(default_factory=Schedule)


def drafter_config(
    target_config,
    mask_token_id: int,
    block_size: int,
    num_layers: int = 1,
    target_layer_ids=None,
    intermediate_size: int | None = None,
) -> DFlashConfig:
    """A drafter shaped like the target's layers (hidden size, heads, RoPE), `num_layers` deep."""
    target_layers = target_config.num_hidden_layers
    heads = target_config.num_attention_heads
    config = DFlashConfig(
        hidden_size=target_config.hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=getattr(target_config, "num_key_value_heads", None) or heads,
        head_dim=getattr(target_config, "head_dim", None) or target_config.hidden_size // heads,
        intermediate_size=intermediate_size or target_config.intermediate_size,
        block_size=block_size,
        mask_token_id=mask_token_id,
        target_layer_ids=tuple(target_layer_ids or default_target_layer_ids(target_layers, num_layers)),
        num_target_layers=target_layers,
        layer_types=(FULL_ATTENTION,) * num_layers,
        rope_theta=float(_rope_theta(target_config)),
        rms_norm_eps=float(getattr(target_config, "rms_norm_eps", 1e-6)),
        max_position_embeddings=int(getattr(target_config, "max_position_embeddings", 40960)),
        vocab_size=target_config.vocab_size,
    )
    config.check()
    config.validate_against(target_config)
    return config


def _rope_theta(target_config) -> float:
    params = getattr(target_config, "rope_parameters", None) or {}
    return params.get("rope_theta") or getattr(target_config, "rope_theta", None) or 10000.0


def freeze(target) -> None:
    target.eval()
    for param in target.parameters():
        param.requires_grad_(False)


def train_drafter(
    target,
    draft: DFlashDraftModel,
    examples: list[Example],
    recipe: DrafterRecipe,
    eval_prompts: list[list[int]] = (),
    eval_max_new_tokens: int = 64,
    pad_id: int = 0,
    context: Callable[[Batch], torch.Tensor] | None = None,
) -> list[dict]:
    """`context(batch)`: the target's features of a batch computed beforehand (feature_cache.py);
    None: a target forward every step."""
    freeze(target)
    draft.train()
    device = target.get_input_embeddings().weight.device
    config = draft.config
    block_sizes = recipe.train_block_sizes or (recipe.block_size,)
    generator = torch.Generator().manual_seed(recipe.seed)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def loss_of(batch: Batch, step: int):
        block = block_sizes[step % len(block_sizes)]
        count = max(1, recipe.anchors * recipe.block_size // block)
        anchors = torch.stack([sample_anchors(m, count, generator) for m in batch.loss_mask])
        anchors = anchors[:, : max(1, int((anchors >= 0).sum(1).max()))]  # drop all-padding columns
        features = None if context is None else context(batch).to(device)
        batch = batch.to(device)
        blocks = make_blocks(batch.input_ids, batch.loss_mask, anchors.to(device), block,
                             config.mask_token_id, recipe.gamma or default_gamma(block))  # fmt: skip
        with autocast:
            out = draft_loss(target, draft, batch.input_ids, blocks, features)
        return out.loss, {"acc": float(out.accuracy)}

    def evaluate() -> dict:
        eos = getattr(target.generation_config, "eos_token_id", None)
        stops = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        result = acceptance(target, draft, list(eval_prompts), recipe.block_size, eval_max_new_tokens, stops)
        return {"accept_length": round(result.mean, 3)}

    def batches_of_epoch(epoch: int) -> list[Batch]:
        return epoch_batches(examples, recipe.tokens_per_batch, pad_id, recipe.seed + epoch)

    return fit(draft.parameters(), loss_of, batches_of_epoch, recipe.schedule,
               evaluate if eval_prompts else None, desc="drafter")  # fmt: skip
