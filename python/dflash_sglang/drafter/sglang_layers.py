"""The drafter's decoder layers sharded like the target, from SGLang's parallel linear layers.

The math is `model.DFlashDecoderLayer`'s (QK-norm, RoPE, SwiGLU, KV injection through
`key_values`); only the projections change: q/k/v fuse into a `QKVParallelLinear` and gate/up
into a `MergedColumnParallelLinear` (column-parallel: each TP rank holds its heads and its slice
of the MLP), `o_proj` and `down_proj` are `RowParallelLinear` (their outputs are all-reduced, so
the residual stream is the same on every rank). At TP=1 they are plain matmuls. Norms are per
head or over the full hidden size and stay replicated.

Checkpoints keep the published names (`q_proj`, `gate_proj`, ...): `load_checkpoint` checks every
tensor against the unsharded shapes of the plain model and hands it to the owning layer's
`weight_loader`, which cuts this rank's shard.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from sglang.srt.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from sglang.srt.model_loader.weight_utils import default_weight_loader, sharded_weight_loader
from sglang.srt.utils import set_weight_attrs
from torch import nn
from torch.nn import functional as F
from transformers.activations import ACT2FN
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from . import laguna
from . import model as plain
from .config import DFlashConfig

# checkpoint name -> (parameter name, shard id), as SGLang's own models map stacked weights
STACKED = (
    ("q_proj", "qkv_proj", "q"),
    ("k_proj", "qkv_proj", "k"),
    ("v_proj", "qkv_proj", "v"),
    ("gate_proj", "gate_up_proj", 0),
    ("up_proj", "gate_up_proj", 1),
)


class ShardedAttention(nn.Module):
    def __init__(self, config: DFlashConfig, layer: int):
        super().__init__()
        hidden, hd, bias = config.hidden_size, config.head_dim, config.attention_bias
        prefix = f"layers.{layer}.self_attn"
        self.layer, self.head_dim = layer, hd
        self.window, self.causal = config.window_of(layer), config.is_causal(layer)
        self.qkv_proj = QKVParallelLinear(
            hidden, hd, config.num_attention_heads, config.num_key_value_heads, bias=bias,
            prefix=f"{prefix}.qkv_proj",
        )  # fmt: skip
        # This rank's heads; kv heads are replicated when there are fewer than ranks.
        self.heads, self.kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size, self.kv_size = self.heads * hd, self.kv_heads * hd
        self.o_proj = RowParallelLinear(
            config.num_attention_heads * hd, hidden, bias=bias, prefix=f"{prefix}.o_proj"
        )
        self.q_norm = Qwen3RMSNorm(hd, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(hd, eps=config.rms_norm_eps)
        plain.add_value_scale_and_sinks(self, config, self.heads)  # this rank's heads' sinks
        self.per_head_gate, self.g_proj = config.laguna_gating == "per-head", None
        if config.laguna_gating:  # Laguna's gate, sharded by heads like the queries
            width = laguna.gate_width(config, config.num_attention_heads)
            self.g_proj = ColumnParallelLinear(hidden, width, bias=False, prefix=f"{prefix}.g_proj")
        if self.attention_sink_bias is not None:  # each rank cuts its heads from the checkpoint's
            loader = sharded_weight_loader(0, parallel_group="tp")
            set_weight_attrs(self.attention_sink_bias, {"weight_loader": loader})

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(*x.shape[:-1], n, self.head_dim)

    def _rope_keys(self, k, v, cos, sin):
        k = self.k_norm(self._heads(k, self.kv_heads))
        return plain.apply_rotary(k, cos, sin), self._heads(plain.scaled(v, self.value_scale), self.kv_heads)

    def key_values(self, x, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's keys and values of [.., seq, D] (KV injection): the k/v rows of the fused
        weight only, no queries."""
        rows = slice(self.q_size, self.q_size + 2 * self.kv_size)
        bias = None if self.qkv_proj.bias is None else self.qkv_proj.bias[rows]
        k, v = F.linear(x, self.qkv_proj.weight[rows], bias).split([self.kv_size, self.kv_size], dim=-1)
        return self._rope_keys(k, v, cos, sin)

    def forward(self, block, cos, sin, attend: plain.Attend) -> torch.Tensor:
        q, k, v = self.qkv_proj(block)[0].split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = plain.apply_rotary(self.q_norm(self._heads(q, self.heads)), cos, sin)
        k, v = self._rope_keys(k, v, cos, sin)
        out = attend(self.layer, q, k, v)
        if self.g_proj is not None:
            out = laguna.gated(self.g_proj(block)[0], out, self.per_head_gate, self.heads)
        return self.o_proj(out)[0]


class ShardedMLP(nn.Module):
    def __init__(self, config: DFlashConfig, layer: int):
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        prefix = f"layers.{layer}.mlp"
        self.gate_up_proj = MergedColumnParallelLinear(
            hidden, [inner, inner], bias=False, prefix=f"{prefix}.gate_up_proj"
        )
        self.down_proj = RowParallelLinear(inner, hidden, bias=False, prefix=f"{prefix}.down_proj")
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x)[0].chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)[0]


class ShardedDecoderLayer(plain.DFlashDecoderLayer):
    def __init__(self, config: DFlashConfig, layer: int):
        nn.Module.__init__(self)  # the plain layer's modules, sharded
        self.self_attn = ShardedAttention(config, layer)
        self.mlp = ShardedMLP(config, layer)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        plain.add_block_convs(self, config)  # replicated on every rank


def checkpoint_shapes(config: DFlashConfig) -> dict[str, torch.Size]:
    """Every weight a checkpoint of `config` holds, with its unsharded shape."""
    with torch.device("meta"):
        reference = plain.DFlashDraftModel(config)
    return {name: p.shape for name, p in reference.named_parameters()}


def parameter_of(name: str) -> tuple[str, object]:
    """A checkpoint name -> (the sharded model's parameter name, shard id or None)."""
    for weight, param, shard in STACKED:
        if f".{weight}." in name:
            return name.replace(f".{weight}.", f".{param}."), shard
    return name, None


def load_checkpoint(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]], shapes, strict: bool):
    """Load checkpoint tensors into their shards; returns the names loaded.

    strict (the startup load): names may carry `model.`, every other name is an error, and
    rotary caches are skipped. Otherwise (weight updates) only the drafter's own names load."""
    params = dict(model.named_parameters())
    loaded = set()
    for name, tensor in weights:
        if strict:
            name = name.removeprefix("model.")
        if name not in shapes:
            if strict and "rotary_emb" not in name:
                raise ValueError(f"drafter checkpoint has a weight the config does not: {name}")
            continue
        if tensor.shape != shapes[name]:
            raise ValueError(
                f"drafter weight {name} has shape {tuple(tensor.shape)}, "
                f"the config expects {tuple(shapes[name])}"
            )
        param_name, shard = parameter_of(name)
        param = params[param_name]
        loader = getattr(param, "weight_loader", default_weight_loader)
        loader(param, tensor) if shard is None else loader(param, tensor, shard)
        loaded.add(name)
    return loaded
