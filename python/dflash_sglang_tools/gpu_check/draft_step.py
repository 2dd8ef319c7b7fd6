"""Our drafter (model.DFlashDraftModel, random weights) as one draft step on static buffers: eager vs
CUDA-graph replay, each timed, and checked against the model's own forward."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn import functional as F

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel, block_visibility

from .shapes import Shapes
from .timing import Captured, median_ms, same


@contextlib.contextmanager
def building_on(device: torch.device, dtype: torch.dtype):
    """Create parameters on `device` in `dtype` directly: an 8B model never touches the CPU."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous)


def random_drafter(raw_config: dict[str, Any], device: torch.device, dtype: torch.dtype):
    """The drafter and a stand-in for the target's embedding / LM head ([V, D], random)."""
    config = DFlashConfig.from_dict(raw_config)
    with building_on(device, dtype):
        # Built in `dtype` rather than cast to it: RoPE's inverse frequencies stay float32.
        model = DFlashDraftModel(config).eval()
        vocab_weight = 0.02 * torch.randn(raw_config["vocab_size"], config.hidden_size)
    return model, vocab_weight


class DraftStep:
    """One draft step on static tensors, as a CUDA graph needs them.

    Embed [verified token, MASK x (B-1)], inject the target features of the `block` positions
    committed last step as context K/V, run the layers over the block, project positions 1.. with
    the LM head and take the argmax. The context cache is one static [b, C + B, kv, hd] buffer per
    layer: slots [0, C - B) hold the older context, [C - B, C) are rewritten with the new context
    and [C, C + B) with the block's own keys/values every step (what a paged pool does in place).
    """

    def __init__(self, model: DFlashDraftModel, vocab_weight: torch.Tensor, batch: int, context: int):
        cfg = model.config
        self.model, self.vocab_weight = model, vocab_weight
        device, dtype = vocab_weight.device, vocab_weight.dtype
        B, C = cfg.block_size, context
        self.old, self.context = C - B, C

        def rows(start: int, n: int) -> torch.Tensor:
            return torch.arange(start, start + n, device=device).expand(batch, n).contiguous()

        self.tokens = torch.full((batch, B), cfg.mask_token_id, device=device)
        self.tokens[:, 0] = torch.randint(0, vocab_weight.shape[0], (batch,), device=device)
        self.positions = rows(C, B)
        self.key_positions = rows(0, C + B)
        width = cfg.num_target_features * cfg.hidden_size
        self.features = torch.randn(batch, B, width, device=device, dtype=dtype)
        self.feature_positions = rows(self.old, B)
        # The older context's K/V once, through the model's own KV-injection path.
        old_features = torch.randn(batch, self.old, width, device=device, dtype=dtype)
        self.old_positions = rows(0, self.old)
        old_kv = model.context_key_values(model.fuse_target_features(old_features), self.old_positions)
        self.keys, self.values = [], []
        for k, v in old_kv:
            self.keys.append(k.new_zeros(batch, C + B, *k.shape[2:]))
            self.values.append(v.new_zeros(batch, C + B, *v.shape[2:]))
            self.keys[-1][:, : self.old] = k
            self.values[-1][:, : self.old] = v

    def embeds(self) -> torch.Tensor:
        return F.embedding(self.tokens, self.vocab_weight)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(final hidden states [b, B, D], draft tokens [b, B-1])."""
        model = self.model
        context = model.fuse_target_features(self.features)
        for layer, (k, v) in enumerate(model.context_key_values(context, self.feature_positions)):
            self.keys[layer][:, self.old : self.context].copy_(k)
            self.values[layer][:, self.old : self.context].copy_(v)
        hidden = model.run_layers(self.embeds(), self.positions, self.attend)
        # One [b * (B-1), D] product: on the sliced [b, B-1, D] view linear runs b products, each
        # reading the whole vocabulary weight (80% of the step at batch 32 on an H100, docs/gpu.md).
        masked = hidden[:, 1:].reshape(-1, hidden.shape[-1])
        return hidden, F.linear(masked, self.vocab_weight).argmax(-1).view(hidden.shape[0], -1)

    def attend(self, layer: int, q, k, v) -> torch.Tensor:
        attn = self.model.layers[layer].self_attn
        self.keys[layer][:, self.context :].copy_(k)
        self.values[layer][:, self.context :].copy_(v)
        # Full attention sees everything (the published drafter): no mask keeps SDPA on flash.
        mask = None
        if attn.window is not None or attn.causal:
            visible = block_visibility(self.positions, self.key_positions, attn.window, attn.causal)
            mask = visible.unsqueeze(1)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            self.keys[layer].transpose(1, 2),
            self.values[layer].transpose(1, 2),
            attn_mask=mask,
            scale=attn.head_dim**-0.5,
            enable_gqa=True,
        )
        return out.transpose(1, 2).flatten(-2)

    def reference(self) -> torch.Tensor:
        """The same step through DFlashDraftModel.forward and its growing DraftContextCache."""
        n = len(self.model.layers)
        cache = DraftContextCache(n, batch=self.tokens.shape[0], device=self.tokens.device)
        cache.keys = [k[:, : self.old].clone() for k in self.keys]
        cache.values = [v[:, : self.old].clone() for v in self.values]
        cache.positions = self.old_positions
        return self.model(self.embeds(), self.positions, self.features, self.feature_positions, cache)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def check_drafter(shapes: Shapes, device: torch.device) -> list[dict[str, Any]]:
    model, vocab_weight = random_drafter(shapes.draft, device, shapes.dtype)
    rows = []
    for batch in shapes.batches:
        step = DraftStep(model, vocab_weight, batch, shapes.context)
        hidden, _ = step()
        row: dict[str, Any] = {
            "batch": batch,
            "context": shapes.context,
            "block": shapes.block_size,
            "ref_rel_err": relative_error(hidden, step.reference()),
            "eager_ms": median_ms(step, device, shapes.iters, shapes.warmup),
        }
        graph = Captured(step, device)
        row.update(graph=graph.status, graph_ms=None, replay_equal=None, replay_max_diff=None)
        if graph.ok:
            row["graph_ms"] = median_ms(graph.replay, device, shapes.iters, shapes.warmup)
            eager = tuple(t.clone() for t in step())
            graph.replay()
            row["replay_equal"], row["replay_max_diff"] = same(graph.outputs, eager)
        graph.release()
        rows.append(row)
    return rows
