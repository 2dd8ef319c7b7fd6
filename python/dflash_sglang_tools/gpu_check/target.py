"""A transformers Qwen3 target (random weights) timed for one decode token and one verify block over
a KV cache of constant length: the T_decode and T_verify of the speedup bound.

The cache is transformers' StaticCache rather than DynamicCache: DynamicCache grows by torch.cat,
copying the whole cache in every forward (a cost SGLang's paged pool does not have) and cannot sit
in a CUDA graph. StaticCache writes the new tokens in place; rewinding its length after each call
("crop") keeps every call at the same context. The causal mask is built once and passed in:
transformers' own mask builder reads the cache length back to the host for a multi-token query
(`q_offset == 0` in `_ignore_causal_mask_sdpa`), which no CUDA graph can capture.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, StaticCache

from .draft_step import building_on
from .shapes import Shapes
from .timing import Captured, median_ms, replay_vs_eager


def random_target(kwargs: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Qwen3ForCausalLM:
    config = Qwen3Config(**kwargs)
    with building_on(device, dtype):
        model = Qwen3ForCausalLM._from_config(config, dtype=dtype, attn_implementation="sdpa")
    return model.eval()


class TargetStep:
    """One target forward of `tokens` new tokens per request at positions [C, C + tokens)."""

    def __init__(self, model: Qwen3ForCausalLM, cache: StaticCache, batch: int, context: int, tokens: int):
        device = model.device
        self.model, self.cache, self.context = model, cache, context
        self.input_ids = torch.randint(0, model.config.vocab_size, (batch, tokens), device=device)
        self.positions = torch.arange(context, context + tokens, device=device).expand(batch, tokens)
        # [b, 1, q, max_cache_len], True where a query may look: its own and earlier positions.
        keys = torch.arange(cache.get_max_length(), device=device)
        visible = keys.view(1, -1) <= self.positions[0].view(-1, 1)
        self.mask = {"full_attention": visible.expand(batch, 1, tokens, keys.numel())}

    def __call__(self) -> torch.Tensor:
        out = self.model(
            input_ids=self.input_ids,
            position_ids=self.positions,
            attention_mask=self.mask,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits

    def rewind(self) -> None:
        """Back to C committed tokens: the next call overwrites the same slots."""
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.context)


def prefilled_cache(model: Qwen3ForCausalLM, batch: int, context: int, block: int) -> StaticCache:
    cache = StaticCache(config=model.config, max_cache_len=context + block)
    prompt = torch.randint(0, model.config.vocab_size, (batch, context), device=model.device)
    model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def time_target(shapes: Shapes, device: torch.device) -> list[dict[str, Any]]:
    model = random_target(shapes.target, device, shapes.dtype)
    rows = []
    for batch in shapes.batches:
        cache = prefilled_cache(model, batch, shapes.context, shapes.block_size)
        row: dict[str, Any] = {"batch": batch, "context": shapes.context}
        for name, tokens in (("decode", 1), ("verify", shapes.block_size)):
            step = TargetStep(model, cache, batch, shapes.context, tokens)
            row[f"{name}_eager_ms"] = median_ms(step, device, shapes.iters, shapes.warmup, after=step.rewind)
            graph = Captured(step, device, after=step.rewind)
            row[f"{name}_graph"] = graph.status
            row[f"{name}_graph_ms"] = row[f"{name}_replay"] = None
            if graph.ok:
                row[f"{name}_graph_ms"] = median_ms(
                    graph.replay, device, shapes.iters, shapes.warmup, after=step.rewind
                )
                eager = step().clone()
                step.rewind()
                graph.replay()
                step.rewind()
                row[f"{name}_replay"] = replay_vs_eager(graph.outputs, eager)
            graph.release()
        del cache
        rows.append(row)
    return rows
