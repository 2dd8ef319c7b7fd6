"""MiMo's drafter extras (attention sinks, value scale 0.5), each alone and both: our engine-free
`DFlashDraftModel` against SGLang's `DFlashDraftModel` on the same weights and inputs, in float64.

SGLang's side runs its own `DFlashDraftModel.forward`, `DFlashDecoderLayer.forward`,
`DFlashAttention.forward` / `kv_proj_only` / `apply_k_norm` / `apply_k_rope` and
`project_target_hidden` on instances built around stand-ins (its __init__ needs a TP runtime): TP=1
matmuls for the parallel linears, our norms, RoPE and MLP, and the attention kernel's sink softmax
restated from its Triton extend kernel. The context K/V take either SGLang's per-layer path (CPU) or
its fused one (CUDA: `FusedKVMaterializeHelper`, restated; it writes V without the value scale).
"""

import inspect
from types import SimpleNamespace

import pytest
import torch
from sglang.kernels.ops.speculative import fused_kv_materialize
from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
from sglang.srt.models.dflash import DFlashAttention, DFlashDecoderLayer
from sglang.srt.models.dflash import DFlashDraftModel as SGLangDraftModel
from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
from torch import nn
from torch.nn import functional as F

from dflash_sglang.drafter.config import DFlashConfig
from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel, apply_rotary

VARIANTS = {
    "sinks": {"attention_sink_bias": True},
    "value_scale": {"attention_value_scale": 0.5},
    "both": {"attention_sink_bias": True, "attention_value_scale": 0.5},
}
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, FEATURES, VOCAB = 64, 4, 2, 16, 2, 3, 97
CONTEXT, BLOCK = 12, 8


def drafter(variant: str) -> DFlashDraftModel:
    config = DFlashConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, intermediate_size=96, block_size=BLOCK, mask_token_id=0,
        target_layer_ids=tuple(range(FEATURES)), num_target_layers=FEATURES + 2,
        layer_types=("full_attention",) * LAYERS, **VARIANTS[variant],
    )  # fmt: skip
    config.check()
    model = DFlashDraftModel(config).double().eval()
    generator = torch.Generator().manual_seed(len(variant))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("attention_sink_bias"):  # wide, as trained sinks are (tiny_variants.py)
                param.copy_(1.0 + 2.0 * torch.randn(param.shape, generator=generator))
            elif name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(0.3 * torch.randn(param.shape, generator=generator))
    return model


class ParallelLinearStandIn(nn.Module):
    """SGLang's QKV/RowParallelLinear at TP=1 and unquantized: a matmul returning (output, None)."""

    def __init__(self, *weights: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(torch.cat(weights).detach().clone())
        self.bias = None
        self.quant_method = UnquantizedLinearMethod()

    def forward(self, x):
        return F.linear(x, self.weight), None


class ResidualNormStandIn(nn.Module):
    """SGLang's RMSNorm(x, residual): the norm of x + residual, and that sum as the new residual."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, x, residual=None):
        if residual is None:
            return self.norm(x)
        x = x + residual
        return self.norm(x), x


class RopeStandIn:
    """SGLang's neox `rotary_emb(positions, q, k)` on flat [N, heads * head_dim], with our cos/sin."""

    def __init__(self, model: DFlashDraftModel):
        self.model = model

    def __call__(self, positions, q, k):
        cos, sin = self.model.rope(q, positions.view(1, -1))
        cos, sin = cos[0], sin[0]

        def rotate(x):
            return apply_rotary(x.view(x.shape[0], -1, HEAD_DIM), cos, sin).flatten(-2)

        return rotate(q), rotate(k)


class ExtendKernelStandIn:
    """The draft forward's RadixAttention as SGLang's Triton extend kernel computes it
    (kernels/ops/attention/extend_attention.py, `if HAS_SINK: deno += exp(cur_sink - e_max)`): per
    query head h, exp(s - max) over the pool's context keys and the block's, normalized by their sum
    plus exp(sinks[h] - max) (the sink logit unscaled, its value zero). Full layers: non-causal."""

    def __init__(self, layer_id: int):
        self.layer_id, self.scaling = layer_id, HEAD_DIM**-0.5

    def __call__(self, q, k, v, forward_batch, sinks=None):
        context_k, context_v = forward_batch.pool[self.layer_id]
        group = HEADS // KV_HEADS
        keys = torch.cat([context_k, k.view(-1, KV_HEADS, HEAD_DIM)]).repeat_interleave(group, dim=1)
        values = torch.cat([context_v, v.view(-1, KV_HEADS, HEAD_DIM)]).repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.view(-1, HEADS, HEAD_DIM), keys) * self.scaling
        e_max = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - e_max)
        deno = p.sum(-1, keepdim=True)
        if sinks is not None:
            deno = deno + torch.exp(sinks.view(-1, 1, 1) - e_max)
        return torch.einsum("hqk,khd->qhd", p / deno, values).flatten(-2)


def sglang_attention(ours, layer_id: int, model: DFlashDraftModel, v_scale, sinks) -> DFlashAttention:
    attention = DFlashAttention.__new__(DFlashAttention)
    nn.Module.__init__(attention)
    attention.num_heads, attention.num_kv_heads, attention.head_dim = HEADS, KV_HEADS, HEAD_DIM
    attention.q_size, attention.kv_size = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    attention.qkv_proj = ParallelLinearStandIn(ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight)
    attention.o_proj = ParallelLinearStandIn(ours.o_proj.weight)
    attention.q_norm, attention.k_norm = ours.q_norm, ours.k_norm
    attention.use_gemma_norm, attention.use_table_qk_norm_rope = False, False
    attention.rotary_emb = RopeStandIn(model)
    attention.v_scale = v_scale
    attention.attention_sink_bias = sinks
    attention.attn = ExtendKernelStandIn(layer_id)
    return attention


def sglang_drafter(model: DFlashDraftModel, extras: bool = True) -> SGLangDraftModel:
    """SGLang's drafter over `model`'s weights; extras=False drops the sinks and the value scale."""
    draft_config = parse_dflash_draft_config(
        draft_hf_config=model.config.to_dict()
    )  # SGLang reads our config
    sglang = SGLangDraftModel.__new__(SGLangDraftModel)
    nn.Module.__init__(sglang)
    sglang.embed_tokens, sglang.quantizable, sglang.num_context_features = None, False, FEATURES
    sglang.config = SimpleNamespace(hidden_size=HIDDEN)
    sglang.fc, sglang.hidden_norm, sglang.norm = model.fc, model.hidden_norm, ResidualNormStandIn(model.norm)
    layers = []
    for i, ours in enumerate(model.layers):
        layer = DFlashDecoderLayer.__new__(DFlashDecoderLayer)
        nn.Module.__init__(layer)
        sinks = ours.self_attn.attention_sink_bias
        if sinks is not None:
            sinks = nn.Parameter(sinks.detach().clone(), requires_grad=False)
        layer.self_attn = sglang_attention(ours.self_attn, i, model,
                                           draft_config.attention_value_scale if extras else None,
                                           sinks if extras else None)  # fmt: skip
        layer.input_layernorm = ResidualNormStandIn(ours.input_layernorm)
        layer.post_attention_layernorm = ResidualNormStandIn(ours.post_attention_layernorm)
        layer.mlp, layer.attention_conv, layer.mlp_conv = ours.mlp, None, None
        layers.append(layer)
    sglang.layers = nn.ModuleList(layers)
    return sglang


def context_kv_sequential(attention: DFlashAttention, context, positions):
    """dflash_worker_v2.py `_append_target_hidden_sequential` (CPU): SGLang's own K/V methods."""
    k, v = attention.kv_proj_only(context)
    k = attention.apply_k_rope(positions, attention.apply_k_norm(k))
    return k.view(-1, KV_HEADS, HEAD_DIM), v.view(-1, KV_HEADS, HEAD_DIM)


def context_kv_fused(attention: DFlashAttention, context, positions):
    """fused_kv_materialize.py (CUDA): the k/v rows of the qkv weight in one GEMM, then the kernel's
    RMSNorm + RoPE of K; V is stored as projected (`tl.store(v_write + offs, v_raw)`), unscaled."""
    rows = slice(attention.q_size, attention.q_size + 2 * attention.kv_size)
    k, v = F.linear(context, attention.qkv_proj.weight[rows]).split([attention.kv_size] * 2, dim=-1)
    k = attention.apply_k_rope(positions, attention.apply_k_norm(k))
    return k.view(-1, KV_HEADS, HEAD_DIM), v.view(-1, KV_HEADS, HEAD_DIM)


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(1, CONTEXT, FEATURES * HIDDEN, generator=generator, dtype=torch.float64)
    embeds = torch.randn(1, BLOCK, HIDDEN, generator=generator, dtype=torch.float64)
    lm_head = 0.3 * torch.randn(VOCAB, HIDDEN, generator=generator, dtype=torch.float64)
    positions = torch.arange(CONTEXT + BLOCK).view(1, -1)
    return features, embeds, lm_head, positions[:, :CONTEXT], positions[:, CONTEXT:]


def attention_outputs(modules) -> list[torch.Tensor]:
    """Each attention module's output of the next forward, flat [B, D] (hooks removed after one call
    each). Compared too because the RMSNorms round to float32, which hides float64-order differences."""
    outputs = []

    def keep(module, args, output):
        outputs.append(output.reshape(BLOCK, HIDDEN))
        handles.pop(0).remove()

    handles = [module.register_forward_hook(keep) for module in modules]
    return outputs


def ours_hidden(model: DFlashDraftModel) -> tuple[torch.Tensor, list[torch.Tensor]]:
    features, embeds, _, context_positions, block_positions = inputs()
    attention = attention_outputs(layer.self_attn for layer in model.layers)
    with torch.no_grad():
        cache = DraftContextCache(LAYERS)
        return model(embeds, block_positions, features, context_positions, cache)[0], attention


def sglang_hidden(sglang: SGLangDraftModel, context_kv) -> tuple[torch.Tensor, list[torch.Tensor]]:
    features, embeds, _, context_positions, block_positions = inputs()
    attention = attention_outputs(layer.self_attn for layer in sglang.layers)
    with torch.no_grad():
        context = sglang.project_target_hidden(features[0])
        pool = {i: context_kv(layer.self_attn, context, context_positions[0])
                for i, layer in enumerate(sglang.layers)}  # fmt: skip
        out = sglang.forward(None, block_positions[0], SimpleNamespace(pool=pool), input_embeds=embeds[0])
    return out.hidden_states, attention


def max_diffs(ours, theirs, lm_head) -> tuple[float, float, float]:
    """Max |difference| of the final hidden states, of their logits, and of the attention outputs."""
    (hidden, attention), (their_hidden, their_attention) = ours, theirs
    assert len(attention) == len(their_attention) == LAYERS
    return (
        (hidden - their_hidden).abs().max().item(),
        (hidden @ lm_head.T - their_hidden @ lm_head.T).abs().max().item(),
        max((a - b).abs().max().item() for a, b in zip(attention, their_attention, strict=True)),
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_sglang_reads_our_variant_fields(variant):
    parsed = parse_dflash_draft_config(draft_hf_config=drafter(variant).config.to_dict())
    assert parsed.attention_sink_bias == VARIANTS[variant].get("attention_sink_bias", False)
    assert parsed.attention_value_scale == VARIANTS[variant].get("attention_value_scale")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_our_drafter_is_sglangs_on_its_per_layer_context_path(variant):
    model = drafter(variant)
    theirs = sglang_hidden(sglang_drafter(model), context_kv_sequential)
    hidden, logits, attention = max_diffs(ours_hidden(model), theirs, inputs()[2])
    print(
        f"{variant}: max |diff| hidden {hidden:.3e}, logits {logits:.3e}, attention outputs {attention:.3e}"
    )
    assert hidden < 1e-10 and logits < 1e-10 and attention < 1e-10
    # not vacuous: the same weights without the variant's extras draft something else
    plain = sglang_hidden(sglang_drafter(model, extras=False), context_kv_sequential)
    assert (plain[0] - theirs[0]).abs().max().item() > 1e-3


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_sglangs_fused_context_path_drops_the_value_scale(variant):
    """On CUDA SGLang writes the context K/V with `FusedKVMaterializeHelper`, which takes no value
    scale: the context's V stay unscaled while the block's are scaled, so with attention_value_scale
    its drafts are not the model's. Sinks alone are unaffected."""
    for function in (
        fused_kv_materialize._fused_norm_rope_stacked,
        fused_kv_materialize.FusedKVMaterializeHelper,
    ):
        assert not [name for name in inspect.signature(function).parameters if "scale" in name]
    model = drafter(variant)
    fused = sglang_hidden(sglang_drafter(model), context_kv_fused)
    hidden, logits, attention = max_diffs(ours_hidden(model), fused, inputs()[2])
    print(f"{variant}: fused context path, max |diff| hidden {hidden:.3e}, logits {logits:.3e}")
    if "attention_value_scale" in VARIANTS[variant]:
        assert hidden > 1e-3
    else:
        assert hidden < 1e-10 and attention < 1e-10
