"""The draft model as SGLang's model runner loads it (`architectures: ["DFlashDraftModel"]`).

It is the plain-PyTorch `model.DFlashDraftModel` (same math, same checkpoint names) with its
decoder layers sharded over the TP ranks like the target (drafter/sglang_layers.py) and SGLang's paged
attention plugged in: each layer attends through a `RadixAttention` over this rank's heads of the
draft KV pool, which holds the injected context keys/values of every committed position. Full
layers are `ENCODER_ONLY` (non-causal over context + block), sliding layers causal with a window.

The worker runs it in `TARGET_VERIFY` mode on the block `[verified token, mask x (B-1)]` embedded
with the target's embedding, and calls `write_context_kv` to inject committed target features.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import torch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.runtime_context import get_parallel
from torch import nn

from ..errors import DFlashConfigError
from . import model as plain
from .config import DFlashConfig
from .generations import SERVED, check_generation
from .sglang_layers import ShardedDecoderLayer, checkpoint_shapes, load_checkpoint

logger = logging.getLogger(__name__)


def sglang_window(config: DFlashConfig, layer: int) -> int:
    """SGLang's `sliding_window_size` of a drafter layer: window_left, the HF window minus the
    current token (-1: full attention)."""
    window = config.window_of(layer)
    return -1 if window is None else window - 1


def draft_config_of(hf_config) -> DFlashConfig:
    """The validated DFlash config of the drafter SGLang loaded (errors name the field)."""
    return DFlashConfig.from_dict(hf_config.to_dict())


# SGLang's CPU TP pads unaligned sizes in the config before the model is built and keeps each
# size as the checkpoint has it under `original_<name>` (`adjust_config_with_unaligned_cpu_tp`).
PADDED_SIZES = {
    "intermediate_size": "original_intermediate_size",
    "num_attention_heads": "original_num_attention_heads",
    "num_key_value_heads": "original_total_num_kv_heads",
}


def checkpoint_config_of(hf_config, config: DFlashConfig) -> DFlashConfig:
    """`config` with the sizes the checkpoint was written with: the model is built padded and its
    parallel layers' weight loaders pad each tensor as it loads, as they do for the target."""
    written = {name: getattr(hf_config, original) for name, original in PADDED_SIZES.items()
               if getattr(hf_config, original, None) is not None}  # fmt: skip
    return dataclasses.replace(config, **written)


def refuse_unsupported_parallelism() -> None:
    """Tensor parallelism and attention DP run; context parallelism does not yet (docs/parallel.md)."""
    parallel = get_parallel()
    if parallel.attn_cp_size > 1:
        raise DFlashConfigError(
            f"--attn-cp-size {parallel.attn_cp_size}: dflash_sglang's worker does not run context "
            "parallelism yet (--tp-size alone is supported); use DFLASH_SGLANG_WORKER=builtin"
        )


def require_our_drafter(model):
    """The drafter SGLang built, if it is ours; SGLang builds its own class for an architecture we
    do not serve (plugin.py), and that is refused naming the architecture."""
    if isinstance(model, DFlashDraftModel):
        return model
    config = getattr(model, "config", None)
    raw = config.to_dict() if hasattr(config, "to_dict") else {}
    check_generation({**raw, "architectures": raw.get("architectures") or [type(model).__name__]})
    raise DFlashConfigError(
        f"the drafter loaded as {type(model).__name__}: dflash_sglang serves {list(SERVED)}"
    )


class DFlashDraftModel(plain.DFlashDraftModel):
    layer_class = ShardedDecoderLayer  # sharded like the target over SGLang's TP group

    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        if quant_config is not None:
            raise DFlashConfigError("quantized DFlash drafters are not supported by dflash_sglang yet")
        refuse_unsupported_parallelism()
        super().__init__(draft_config_of(config))
        self.hf_config = config
        dflash = self.config
        self.checkpoint_shapes = checkpoint_shapes(checkpoint_config_of(config, dflash))
        self.radix = nn.ModuleList(
            RadixAttention(
                num_heads=layer.self_attn.heads,  # this rank's
                head_dim=dflash.head_dim,
                scaling=dflash.head_dim**-0.5,
                num_kv_heads=layer.self_attn.kv_heads,
                layer_id=i,
                sliding_window_size=sglang_window(dflash, i),
                attn_type=AttentionType.DECODER if dflash.is_causal(i) else AttentionType.ENCODER_ONLY,
            )
            for i, layer in enumerate(self.layers)
        )
        self.block_size = dflash.block_size
        self._loaded = False  # the startup load is strict; later loads are weight updates

    # ---- what SGLang's model runner calls ----------------------------------------------------

    def set_block_size(self, block_size: int) -> None:
        self.block_size = int(block_size)
        for layer in self.layers:  # a grouped convolution splits the flat batch into blocks
            for conv in (layer.attention_conv, layer.mlp_conv):
                if conv is not None:
                    conv.block_size = self.block_size

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
            sinks = self.layers[layer].self_attn.attention_sink_bias
            extra = {} if sinks is None else {"sinks": sinks}
            out = self.radix[layer](q.flatten(-2), k.flatten(-2), v.flatten(-2), forward_batch, **extra)
            return out.view(q.shape[0], -1)

        hidden = self.run_layers(input_embeds, positions, attend)
        return LogitsProcessorOutput(next_token_logits=None, hidden_states=hidden)

    def rope(self, like: torch.Tensor, positions: torch.Tensor):
        # SGLang passes flat [N] positions for [N, D] tokens; transformers' RoPE wants a batch dim.
        cos, sin = self.rotary_emb(like, positions.view(1, -1))
        return cos.view(*positions.shape, -1), sin.view(*positions.shape, -1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The first load (startup) is strict: every weight of the config, no other, right shapes.
        Later loads are weight updates (`/update_weights_from_disk`, `..._from_tensor`), which
        SGLang sends to the target and the drafter alike: the drafter takes only tensors named as
        its own (`fc.weight`, `layers.N...`), so a target checkpoint (`model.layers.N...`,
        `lm_head.weight`) leaves it unchanged instead of landing in same-shaped drafter layers."""
        strict = not self._loaded
        try:
            loaded = load_checkpoint(self, weights, self.checkpoint_shapes, strict=strict)
        except ValueError:
            raise  # ours, naming the weight
        except Exception as error:  # SGLang's reader: a truncated or foreign file
            where = getattr(self.hf_config, "_name_or_path", "") or "the drafter checkpoint"
            raise DFlashConfigError(
                f"drafter weights in {where} cannot be read ({type(error).__name__}: {error}); "
                "is a .safetensors file truncated or not a checkpoint?"
            ) from error
        if not strict:
            logger.info("dflash_sglang: weight update: %d drafter tensors updated", len(loaded))
            return
        missing = sorted(set(self.checkpoint_shapes) - loaded)
        if missing:
            raise ValueError(f"drafter checkpoint lacks weights: {missing[:5]}")
        self._loaded = True

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
