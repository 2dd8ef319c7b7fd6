"""A tiny random-weight hybrid target (Qwen3.5-style) + DFlash drafter pair, in the published format.

    python -m dflash_sglang_tools.testing.tiny --hybrid --out DIR [--seed S] [--block-size B] [--swa W]

writes DIR/target, a text-only `Qwen3_5ForCausalLM` whose layers alternate Gated DeltaNet linear
attention and gated full attention (`full_attention_interval`), with the tokenizer and chat
template of `testing.tiny` (with `HybridShape(experts=E)`: a `Qwen3_5MoeForCausalLM`, every layer's
MLP a top-2-of-E mixture of experts plus a gated shared expert, as in Qwen3.5-35B-A3B and
Qwen3.5-397B-A17B), and DIR/draft, a DFlash drafter reading target layers SGLang's Qwen3.5
model can capture. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig

from .tiny_dense import MASK_TOKEN, TinyPair, TinyShape, _init_, build_tokenizer, tiny_draft


@dataclasses.dataclass(frozen=True)
class HybridShape(TinyShape):
    target_layers: int = 4
    # Layer i is full attention when (i + 1) % interval == 0, linear attention otherwise.
    full_attention_interval: int = 2
    linear_key_heads: int = 2
    linear_value_heads: int = 4  # two value heads per key head, as in the real checkpoints
    linear_head_dim: int = 16
    conv_kernel: int = 4
    experts: int = 0  # > 0: the hybrid MoE family (top-2 routing, a gated shared expert)

    def layer_types(self) -> list[str]:
        interval = self.full_attention_interval
        return [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(self.target_layers)
        ]

    def capture_layer_ids(self) -> tuple[int, ...]:
        """`num_features` layers spread over 0..N-2 (SGLang captures layer L's output as the input of
        layer L+1, so the last layer cannot be captured); 4 layers, 3 features: (0, 1, 2)."""
        last = self.target_layers - 2
        if self.num_features == 1:
            return (last // 2,)
        return tuple(round(i * last / (self.num_features - 1)) for i in range(self.num_features))


def hybrid_target_config(shape: HybridShape, vocab_size: int, eos_token_id=None):
    """The text config of `shape`'s target (`Qwen3_5TextConfig`, or the MoE one with experts)."""
    moe = dict(
        num_experts=shape.experts,
        num_experts_per_tok=2,
        moe_intermediate_size=shape.intermediate_size // 2,
        shared_expert_intermediate_size=shape.intermediate_size // 2,
    )
    config_class = Qwen3_5MoeTextConfig if shape.experts else Qwen3_5TextConfig
    return config_class(
        **(moe if shape.experts else {"intermediate_size": shape.intermediate_size}),
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.target_layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        linear_num_key_heads=shape.linear_key_heads,
        linear_num_value_heads=shape.linear_value_heads,
        linear_key_head_dim=shape.linear_head_dim,
        linear_value_head_dim=shape.linear_head_dim,
        linear_conv_kernel_dim=shape.conv_kernel,
        layer_types=shape.layer_types(),
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=eos_token_id,
        dtype="float32",
    )


def hybrid_target_class(shape: HybridShape) -> type:
    return Qwen3_5MoeForCausalLM if shape.experts else Qwen3_5ForCausalLM


def tiny_hybrid_target(
    shape: HybridShape = HybridShape(), seed: int = 0, vocab_size: int | None = None, eos_token_id=None
) -> Qwen3_5ForCausalLM | Qwen3_5MoeForCausalLM:
    config = hybrid_target_config(shape, vocab_size or shape.vocab_size or 512, eos_token_id)
    model = hybrid_target_class(shape)(config)
    _init_(model, shape.init_std, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model.lm_head.weight[shape.hot_token_ids()] *= 20
    return model.eval()


def save_hybrid_target(target, tokenizer, target_dir: Path, interval: int) -> None:
    """The target and its tokenizer in the format SGLang loads (`full_attention_interval` kept)."""
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)
    keep_full_attention_interval(target_dir, interval)


def keep_full_attention_interval(target_dir: Path, interval: int) -> None:
    """SGLang derives the layer kinds from `full_attention_interval`; transformers drops it on save."""
    path = target_dir / "config.json"
    config = json.loads(path.read_text())
    config["full_attention_interval"] = interval
    path.write_text(json.dumps(config, indent=2) + "\n")


def write_tiny_hybrid_pair(
    root: str | Path, seed: int = 0, block_size: int = 8, shape: HybridShape = HybridShape(), **draft_fields
) -> TinyPair:
    root = Path(root)
    tokenizer = build_tokenizer()
    vocab = shape.vocab_size or -(-len(tokenizer) // 64) * 64
    target = tiny_hybrid_target(shape, seed, vocab_size=vocab, eos_token_id=tokenizer.eos_token_id)
    target.generation_config.eos_token_id = tokenizer.eos_token_id
    save_hybrid_target(target, tokenizer, root / "target", shape.full_attention_interval)
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    draft = tiny_draft(
        target.config,
        shape,
        seed + 1,
        block_size,
        mask_token_id=mask_id,
        target_layer_ids=shape.capture_layer_ids(),
        **draft_fields,
    )
    draft.save_pretrained(root / "draft")
    return TinyPair(root / "target", root / "draft")
