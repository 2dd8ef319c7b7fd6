"""The DFlash draft model in plain PyTorch.

A stack of Qwen3-style decoder layers (pre-norm, QK-norm, SwiGLU) with no embedding and no LM
head of its own: the caller embeds the block with the target's embedding and projects the output
with the target's LM head. The target's hidden states from a few layers are fused once
(`fc` + `hidden_norm`) into one context vector per committed position, and every layer reads that
context as extra keys/values ("KV injection"). Queries come only from the block; full-attention
layers see the whole block (non-causal), sliding layers are causal within a window.

The per-step math lives in small functions (`fuse_target_features`, `context_key_values`,
`block_visibility`, ...) so the SGLang draft model can call the same code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    rotate_half,
)

from ..runtime.visibility import block_visibility
from .config import DFlashConfig
from .context import DraftContextCache
from .conv import GroupedBlockConv, wrapped
from .domino import add_domino
from .laguna import add_aux_norms, gate_width, gated, normed_features
from .reference import spec_generate
from .selector import CandidateSelector


def to_qwen3_config(config: DFlashConfig) -> Qwen3Config:
    """The transformers config of the drafter's layer shape (for Qwen3's MLP and RoPE)."""
    rope = {"rope_type": "default", **(config.rope_scaling or {}), "rope_theta": config.rope_theta}
    return Qwen3Config(
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        hidden_act=config.hidden_act,
        rms_norm_eps=config.rms_norm_eps,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters=rope,
    )


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on [.., seq, heads, head_dim] with cos/sin of shape [.., seq, head_dim]."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    return x * cos + rotate_half(x) * sin


# attend(layer_index, q, k, v) -> [.., seq, heads * head_dim]; q/k/v are [.., seq, heads, hd].
# The plain model attends with SDPA over its context cache; the SGLang model with RadixAttention.
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def add_value_scale_and_sinks(attention: nn.Module, config: DFlashConfig, heads: int) -> None:
    """The MiMo variant's extras on an attention module: `value_scale` (1 when plain) and, with
    `attention_sink_bias`, one sink logit per query head (`attention_sink_bias` [heads])."""
    attention.value_scale = config.attention_value_scale or 1.0
    sinks = nn.Parameter(torch.zeros(heads)) if config.attention_sink_bias else None
    attention.register_parameter("attention_sink_bias", sinks)  # the checkpoint's name


def scaled(values: torch.Tensor, scale: float) -> torch.Tensor:
    """Values times the variant's scale; a plain drafter's (1) costs no extra tensor."""
    return values if scale == 1.0 else values * scale


def attention_with_sinks(q, k, v, mask, scale: float, sinks: torch.Tensor | None) -> torch.Tensor:
    """SDPA over [b, heads, q, hd] / [b, heads, k, hd], where each head's softmax also holds its
    sink logit (a key that every query sees and whose value is zero)."""
    if sinks is None:
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    return weights @ v


class DFlashAttention(nn.Module):
    def __init__(self, config: DFlashConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.window = config.window_of(layer)
        self.causal = config.is_causal(layer)
        bias = config.attention_bias
        hidden, hd = config.hidden_size, config.head_dim
        self.q_proj = nn.Linear(hidden, self.heads * hd, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * hd, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * hd, bias=bias)
        self.o_proj = nn.Linear(self.heads * hd, hidden, bias=bias)
        self.q_norm = Qwen3RMSNorm(hd, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(hd, eps=config.rms_norm_eps)
        add_value_scale_and_sinks(self, config, self.heads)
        self.per_head_gate = config.laguna_gating == "per-head"  # Laguna's gate (drafter/laguna.py)
        self.g_proj = (
            nn.Linear(hidden, gate_width(config, self.heads), bias=False) if config.laguna_gating else None
        )

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(*x.shape[:-1], n, self.head_dim)

    def key_values(self, x, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (k-norm, RoPE) and values of a [.., seq, D] sequence: [.., seq, kv_heads, hd].

        Used for the block and, in KV injection, for the fused target context."""
        k = self.k_norm(self._heads(self.k_proj(x), self.kv_heads))
        return apply_rotary(k, cos, sin), self._heads(scaled(self.v_proj(x), self.value_scale), self.kv_heads)

    def forward(self, block, cos, sin, attend: Attend) -> torch.Tensor:
        q = apply_rotary(self.q_norm(self._heads(self.q_proj(block), self.heads)), cos, sin)
        k, v = self.key_values(block, cos, sin)
        out = attend(self.layer, q, k, v)
        if self.g_proj is not None:
            out = gated(self.g_proj(block), out, self.per_head_gate, self.heads)
        return self.o_proj(out)


def add_block_convs(layer: nn.Module, config: DFlashConfig) -> None:
    """The grouped-convolution variant's two convolutions of a layer (None when plain)."""
    for name in ("attention_conv", "mlp_conv"):
        conv = None
        if config.conv_kernel_size:
            conv = GroupedBlockConv(config.hidden_size, config.conv_kernel_size, config.conv_group_size,
                                    config.block_size)  # fmt: skip
        setattr(layer, name, conv)


class DFlashDecoderLayer(nn.Module):
    def __init__(self, config: DFlashConfig, layer: int):
        super().__init__()
        self.self_attn = DFlashAttention(config, layer)
        self.mlp = Qwen3MLP(to_qwen3_config(config))
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        add_block_convs(self, config)

    def forward(self, hidden, cos, sin, attend: Attend) -> torch.Tensor:
        attention = functools.partial(self.self_attn, cos=cos, sin=sin, attend=attend)
        hidden = hidden + wrapped(self.attention_conv, attention, self.input_layernorm(hidden))
        return hidden + wrapped(self.mlp_conv, self.mlp, self.post_attention_layernorm(hidden))


class DFlashDraftModel(nn.Module):
    """Parameter names follow the published checkpoints (`layers.{i}.self_attn.q_proj.weight`,
    `fc.weight`, `hidden_norm.weight`, `norm.weight`)."""

    layer_class = DFlashDecoderLayer  # the SGLang drafter swaps in tensor-parallel layers

    def __init__(self, config: DFlashConfig):
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.layers = nn.ModuleList(self.layer_class(config, i) for i in range(config.num_hidden_layers))
        self.fc = nn.Linear(config.num_target_features * d, d, bias=False)
        self.hidden_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(to_qwen3_config(config))
        add_aux_norms(self, config)  # Laguna's per-feature norms
        add_domino(self, config)  # Domino's GRU and correction (drafter/domino.py); replicated at TP > 1
        self.candidate_selector = None  # DFlash2's (drafter/selector.py); replicated at TP > 1
        if config.selector_rank:
            self.candidate_selector = CandidateSelector(d, config.vocab_size, config.selector_rank,
                                                        config.selector_top_k)  # fmt: skip

    def fuse_target_features(self, features: torch.Tensor) -> torch.Tensor:
        """[.., K*D] concatenated target layer outputs -> [.., D] context vectors."""
        if self.aux_hidden_norms is not None:
            features = normed_features(self.aux_hidden_norms, features)
        return self.hidden_norm(self.fc(features))

    def rope(self, like: torch.Tensor, positions: torch.Tensor):
        return self.rotary_emb(like, positions)

    def run_layers(self, block_embeds: torch.Tensor, block_positions: torch.Tensor, attend: Attend):
        """The block through every layer and the final norm; `attend` supplies the context."""
        cos, sin = self.rope(block_embeds, block_positions)
        hidden = block_embeds
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, attend)
        return self.norm(hidden)

    def context_key_values(self, context: torch.Tensor, positions: torch.Tensor):
        """Per layer, the keys/values of fused context vectors [.., C, D] (KV injection); Laguna
        norms the context with each layer's input norm first."""
        cos, sin = self.rope(context, positions)
        return [
            layer.self_attn.key_values(
                layer.input_layernorm(context) if self.config.laguna else context, cos, sin
            )
            for layer in self.layers
        ]

    def forward(
        self,
        block_embeds: torch.Tensor,
        block_positions: torch.Tensor,
        context_features: torch.Tensor,
        context_positions: torch.Tensor,
        cache: DraftContextCache,
    ) -> torch.Tensor:
        """One draft forward; returns the final-normed hidden states of the block [b, B, D].

        block_embeds: [b, B, D] target embeddings of [verified token, mask x (B-1)];
        context_features: [b, C, K*D] target features of the C positions committed since the last
        call (C may be 0). Their keys/values are appended to `cache`; the block's are not kept.
        """
        context = self.fuse_target_features(context_features.to(block_embeds.dtype))
        for i, (k, v) in enumerate(self.context_key_values(context, context_positions)):
            cache.extend(i, k, v)
        cache.extend_positions(context_positions)
        key_positions = torch.cat([cache.positions, block_positions], dim=1)
        masks = {
            (attn.window, attn.causal): block_visibility(
                block_positions, key_positions, attn.window, attn.causal
            ).unsqueeze(1)
            for attn in (layer.self_attn for layer in self.layers)
        }

        def attend(layer: int, q, k, v):
            attn = self.layers[layer].self_attn
            k = torch.cat([cache.keys[layer], k], dim=1).transpose(1, 2)
            v = torch.cat([cache.values[layer], v], dim=1).transpose(1, 2)
            groups = attn.heads // attn.kv_heads
            out = attention_with_sinks(
                q.transpose(1, 2),
                k.repeat_interleave(groups, dim=1),
                v.repeat_interleave(groups, dim=1),
                masks[(attn.window, attn.causal)],
                attn.head_dim**-0.5,
                attn.attention_sink_bias,
            )
            return out.transpose(1, 2).flatten(-2)

        return self.run_layers(block_embeds, block_positions, attend)

    # ---- z-lab's transformers API ------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def spec_generate(self, input_ids, max_new_tokens: int, temperature: float = 0.0, target=None,
                      stop_token_ids=(), **kwargs) -> torch.Tensor:  # fmt: skip
        """`draft.spec_generate(...)` as on the z-lab model cards: [1, prompt + new tokens]."""
        return spec_generate(self, input_ids, max_new_tokens, temperature, target, stop_token_ids, **kwargs)

    # ---- checkpoints -------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype=None, device=None) -> DFlashDraftModel:
        path = Path(path)
        model = cls(DFlashConfig.from_pretrained(path))
        state = load_safetensors_dir(path)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if "rotary_emb" not in k]
        if missing or unexpected:
            raise ValueError(
                f"drafter weights in {path} do not match the config: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        return model.to(device=device, dtype=dtype).eval()

    def save_pretrained(self, directory: str | Path) -> None:
        directory = Path(directory)
        self.config.save_pretrained(directory)
        state = {k: v.contiguous() for k, v in self.state_dict().items() if "rotary_emb" not in k}
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})


def load_safetensors_dir(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
