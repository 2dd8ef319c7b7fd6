"""The draft model as SGLang's model runner loads it (`architectures: ["DFlashDraftModel"]`).

It is the plain-PyTorch `model.DFlashDraftModel` (same modules, same parameter names, same math)
with SGLang's paged attention plugged in: each layer attends through a `RadixAttention` over the
draft KV pool, which holds the injected context keys/values of every committed position. Full
layers are `ENCODER_ONLY` (non-causal over context + block), sliding layers causal with a window.

The worker runs it in `TARGET_VERIFY` mode on the block `[verified token, mask x (B-1)]` embedded
with the target's embedding, and calls `write_context_kv` to inject committed target features.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from torch import nn

from . import model as plain
from .config import DFlashConfig, DFlashConfigError


def sglang_window(config: DFlashConfig, layer: int) -> int:
    """SGLang's `sliding_window_size` of a drafter layer: window_left, the HF window minus the
    current token (-1: full attention)."""
    window = config.window_of(layer)
    return -1 if window is None else window - 1


def draft_config_of(hf_config) -> DFlashConfig:
    """The validated DFlash config of the drafter SGLang loaded (errors name the field)."""
    return DFlashConfig.from_dict(hf_config.to_dict())


class DFlashDraftModel(plain.DFlashDraftModel):
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        if quant_config is not None:
            raise DFlashConfigError("quantized DFlash drafters are not supported by dflash_sglang yet")
        if get_parallel().tp_size != 1:
            raise DFlashConfigError(
                f"tp_size = {get_parallel().tp_size}: dflash_sglang's drafter runs with tp_size 1 "
                "for now; use DFLASH_SGLANG_WORKER=builtin for tensor-parallel drafting"
            )
        super().__init__(draft_config_of(config))
        self.hf_config = config
        dflash = self.config
        self.radix = nn.ModuleList(
            RadixAttention(
                num_heads=dflash.num_attention_heads,
                head_dim=dflash.head_dim,
                scaling=dflash.head_dim**-0.5,
                num_kv_heads=dflash.num_key_value_heads,
                layer_id=i,
                sliding_window_size=sglang_window(dflash, i),
                attn_type=AttentionType.DECODER if dflash.is_causal(i) else AttentionType.ENCODER_ONLY,
            )
            for i in range(dflash.num_hidden_layers)
        )
        self.block_size = dflash.block_size

    # ---- what SGLang's model runner calls ----------------------------------------------------

    def set_block_size(self, block_size: int) -> None:
        self.block_size = int(block_size)

    def get_attention_sliding_window_size(self) -> int | None:
        windows = [sglang_window(self.config, i) for i in range(self.config.num_hidden_layers)]
        return max(windows) if max(windows) > -1 else None

    def get_input_embeddings(self):
        return None  # the block is embedded with the target's embedding

    @torch.no_grad()
    def forward(self, input_ids, positions, forward_batch, input_embeds=None, **_) -> LogitsProcessorOutput:
        if input_embeds is None:
            raise ValueError("the DFlash drafter needs input_embeds (the target's embedding of the block)")

        def attend(layer: int, q, k, v):
            out = self.radix[layer](q.flatten(-2), k.flatten(-2), v.flatten(-2), forward_batch)
            return out.view(q.shape[0], -1)

        hidden = self.run_layers(input_embeds, positions, attend)
        return LogitsProcessorOutput(next_token_logits=None, hidden_states=hidden)

    def rope(self, like: torch.Tensor, positions: torch.Tensor):
        # SGLang passes flat [N] positions for [N, D] tokens; transformers' RoPE wants a batch dim.
        cos, sin = self.rotary_emb(like, positions.view(1, -1))
        return cos.view(*positions.shape, -1), sin.view(*positions.shape, -1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            name = name.removeprefix("model.")
            if name not in params:
                if "rotary_emb" in name:
                    continue
                raise ValueError(f"drafter checkpoint has a weight the config does not: {name}")
            if params[name].shape != tensor.shape:
                raise ValueError(
                    f"drafter weight {name} has shape {tuple(tensor.shape)}, the config expects "
                    f"{tuple(params[name].shape)}"
                )
            params[name].data.copy_(tensor)
            loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"drafter checkpoint lacks weights: {missing[:5]}")

    # ---- KV injection ------------------------------------------------------------------------

    @torch.no_grad()
    def write_context_kv(self, token_to_kv_pool, features, positions, cache_loc, commit_lens=None) -> None:
        """Fuse target features [N, K*D] and write every layer's keys/values of them at
        `cache_loc` in the draft KV pool. With `commit_lens` ([bs]) and a [bs, B] `cache_loc`,
        only each row's first `commit_lens` tokens are written (the committed prefix)."""
        context = self.fuse_target_features(features.to(self.fc.weight.dtype))
        for layer, (k, v) in enumerate(self.context_key_values(context, positions)):
            if commit_lens is None:
                token_to_kv_pool.set_kv_buffer(self.radix[layer], KVWriteLoc(cache_loc, physical=True), k, v)
            else:
                token_to_kv_pool.set_kv_buffer_prefix_valid(self.radix[layer], cache_loc, commit_lens, k, v)


EntryClass = DFlashDraftModel
