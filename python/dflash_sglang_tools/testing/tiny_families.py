"""Tiny random targets of the other families the seed cards name, in their published on-disk format
(the real `architectures` and config fields, a few layers, a few experts), each with a drafter.

    llama       LlamaForCausalLM        (Llama-3.1-8B)
    qwen3_moe   Qwen3MoeForCausalLM     (Qwen3-Coder-30B-A3B: mixture of experts, top-2 of 4 here)
    gpt_oss     GptOssForCausalLM       (gpt-oss-20b/120b: layers alternating a sliding window of
                                         GPT_OSS_WINDOW tokens and full attention, one attention
                                         sink per head, experts with biases and a clamped SwiGLU,
                                         top-2 of 4 here; YaRN RoPE as published)
    deepseek_v3 DeepseekV3ForCausalLM   (DeepSeek-V3, Kimi-K2: multi-head latent attention with
                                         low-rank q and kv, a dense first layer, then 4 routed
                                         experts (top 2, sigmoid scores) and a shared expert)

SGLang loads the model class the real checkpoint names, so the path a real deployment takes
(hidden-state capture, MoE routing and expert kernels) is the one that runs. The tokenizer and
the drafter are tiny.py's.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from .tiny_dense import (
    MASK_TOKEN,
    TinyPair,
    TinyShape,
    _init_,
    build_tokenizer,
    target_config_fields,
    tiny_draft,
)

FAMILIES = ("llama", "qwen3_moe", "gpt_oss", "deepseek_v3")
# Small enough that prompts of a few dozen tokens already slide out of it.
GPT_OSS_WINDOW = 8
# Below the published 7.0, so the random experts' gate and up projections do reach the clamp.
GPT_OSS_SWIGLU_LIMIT = 1.5
DEEPSEEK_V3_YARN = {
    "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
    "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
}  # fmt: skip


def family_config(family: str, shape: TinyShape, vocab_size: int, eos_token_id: int):
    common = target_config_fields(shape, vocab_size, eos_token_id)
    if family == "llama":
        return LlamaConfig(
            intermediate_size=shape.intermediate_size, rope_theta=500000.0, **common
        ), LlamaForCausalLM
    if family == "qwen3_moe":
        config = Qwen3MoeConfig(
            intermediate_size=shape.intermediate_size,
            moe_intermediate_size=shape.intermediate_size // 2,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            **common,
        )
        return config, Qwen3MoeForCausalLM
    if family == "gpt_oss":
        config = GptOssConfig(
            intermediate_size=shape.intermediate_size,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=GPT_OSS_WINDOW,
            layer_types=[
                "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(shape.target_layers)
            ],
            swiglu_limit=GPT_OSS_SWIGLU_LIMIT,
            **common,
        )
        return config, GptOssForCausalLM
    if family == "deepseek_v3":
        # MLA: q and kv go through low-rank projections (the kv latent is what SGLang caches);
        # each head's key is a no-position part (qk_nope_head_dim) and a rotary part shared by
        # all heads (qk_rope_head_dim). No head_dim of its own, and every head its own kv.
        mla = {key: common.pop(key) for key in ("head_dim", "num_key_value_heads")}
        config = DeepseekV3Config(
            intermediate_size=shape.intermediate_size,
            moe_intermediate_size=shape.intermediate_size // 2,
            q_lora_rank=shape.hidden_size // 2,
            kv_lora_rank=shape.hidden_size // 2,
            qk_nope_head_dim=mla["head_dim"],
            qk_rope_head_dim=mla["head_dim"] // 2,
            v_head_dim=mla["head_dim"],
            num_key_value_heads=shape.heads,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.5,
            # DeepSeek-V3's published YaRN (SGLang's CPU rotary is its deepseek_yarn only).
            rope_parameters=DEEPSEEK_V3_YARN,
            **common,
        )
        # Fields of the published config.json that transformers' class does not declare but
        # SGLang's DeepseekV2 reads: sigmoid scores, top-k after the score-correction bias.
        config.update({"moe_layer_freq": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc"})
        return config, DeepseekV3ForCausalLM
    raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")


def write_tiny_family_pair(
    root: str | Path, family: str, seed: int = 0, block_size: int = 8, shape: TinyShape | None = None
) -> TinyPair:
    root, shape = Path(root), shape or TinyShape()
    tokenizer = build_tokenizer()
    vocab = shape.vocab_size or -(-len(tokenizer) // 64) * 64
    config, model_class = family_config(family, shape, vocab, tokenizer.eos_token_id)
    target = model_class(config)
    generator = torch.Generator().manual_seed(seed)
    _init_(target, shape.init_std, generator)
    with torch.no_grad():
        target.lm_head.weight[shape.hot_token_ids()] *= 20
        for name, param in target.named_parameters():
            if name.endswith("self_attn.sinks"):
                # SGLang holds sinks in bfloat16 on every backend but trtllm_mha (as the published
                # checkpoints store them): values it loads exactly.
                param.copy_(param.to(torch.bfloat16).float())
        for name, bias in target.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3: picks experts, not weights
                bias.copy_(torch.randn(bias.shape, generator=generator) * shape.init_std)
    target.generation_config.eos_token_id = tokenizer.eos_token_id
    target.eval().save_pretrained(root / "target")
    tokenizer.save_pretrained(root / "target")
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    draft = tiny_draft(target.config, shape, seed + 1, block_size, mask_token_id=mask_id)
    draft.save_pretrained(root / "draft")
    return TinyPair(root / "target", root / "draft")
