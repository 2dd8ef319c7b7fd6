"""A tiny random-weight Qwen3 target + DFlash drafter pair, written in the published on-disk format.

`write_tiny_pair(out)` writes out/target (a Qwen3 causal LM: config, safetensors, a locally trained
byte-level BPE tokenizer with a ChatML chat template and a `<|MASK|>` token) and out/draft (a DFlash
drafter config and safetensors). The hybrid target (tiny_hybrid.py), the other families
(tiny_families.py) and the command line (tiny.py) build on it. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from dflash_sglang.drafter.config import DFlashConfig, default_target_layer_ids
from dflash_sglang.drafter.model import DFlashDraftModel

MASK_TOKEN = "<|MASK|>"
HOT_TOKEN_START = 10  # ordinary byte tokens, clear of the special tokens (0-3)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", MASK_TOKEN]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Enough text for a few hundred byte-level merges; fixed, so the tokenizer is reproducible.
CORPUS = """\
def quicksort(items):
    \"\"\"Sort a list of numbers and return a new sorted list.\"\"\"
    if len(items) <= 1:
        return items
    pivot = items[len(items) // 2]
    left = [x for x in items if x < pivot]
    middle = [x for x in items if x == pivot]
    right = [x for x in items if x > pivot]
    return quicksort(left) + middle + quicksort(right)

Write a quicksort in Python. Explain speculative decoding in one paragraph.
A small draft model proposes a block of tokens and the target model verifies the whole block in
one forward pass, keeping the longest correct prefix plus one token of its own. The output is
exactly what the target alone would produce, only faster. What is the capital of France?
The capital of France is Paris. How many days are in a week? There are seven days in a week.
class Stack:
    def __init__(self):
        self.items = []
    def push(self, item):
        self.items.append(item)
    def pop(self):
        return self.items.pop()
for i in range(10):
    print(i, i * i, "hello world")
"""


@dataclasses.dataclass(frozen=True)
class TinyShape:
    vocab_size: int | None = None  # None: the tokenizer's size rounded up to a multiple of 64
    hidden_size: int = 64
    target_layers: int = 6
    draft_layers: int = 2
    num_features: int = 3
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    # Larger than transformers' 0.02 so random logits are far from ties (stable float32 argmax).
    init_std: float = 0.2
    # > 0: the target's LM head strongly favours this many tokens, so even a random drafter
    # (which shares that head) often agrees with it: partial acceptance with 2-4, nearly full
    # acceptance with 1. Tests use it to exercise the accept paths without a trained drafter.
    hot_tokens: int = 0

    def hot_token_ids(self) -> list[int]:
        return list(range(HOT_TOKEN_START, HOT_TOKEN_START + self.hot_tokens))


def build_tokenizer(vocab_size: int = 384, texts: Iterable[str] | None = None) -> PreTrainedTokenizerFast:
    """Byte-level BPE with the ChatML specials and `<|MASK|>`, trained on `texts` (default CORPUS)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts or CORPUS.splitlines(keepends=True), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", MASK_TOKEN],
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def _init_(module: torch.nn.Module, std: float, generator: torch.Generator) -> None:
    for name, param in module.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def target_config_fields(shape: TinyShape, vocab_size: int, eos_token_id) -> dict:
    """The config fields every tiny target shares, whatever its family."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.target_layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=eos_token_id,
        dtype="float32",
    )


def tiny_target(
    shape: TinyShape = TinyShape(), seed: int = 0, vocab_size: int | None = None, eos_token_id=None
):
    config = Qwen3Config(
        intermediate_size=shape.intermediate_size,
        **target_config_fields(shape, vocab_size or shape.vocab_size or 512, eos_token_id),
    )
    model = Qwen3ForCausalLM(config)
    _init_(model, shape.init_std, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model.lm_head.weight[shape.hot_token_ids()] *= 20
    return model.eval()


def tiny_draft(
    target_config,
    shape: TinyShape = TinyShape(),
    seed: int = 1,
    block_size: int = 16,
    mask_token_id: int | None = None,
    **overrides,
) -> DFlashDraftModel:
    fields = dict(
        hidden_size=target_config.hidden_size,
        num_hidden_layers=shape.draft_layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        intermediate_size=shape.intermediate_size,
        block_size=block_size,
        mask_token_id=target_config.vocab_size - 1 if mask_token_id is None else mask_token_id,
        target_layer_ids=tuple(default_target_layer_ids(target_config.num_hidden_layers, shape.num_features)),
        num_target_layers=target_config.num_hidden_layers,
        layer_types=("full_attention",) * shape.draft_layers,
        vocab_size=target_config.vocab_size,
    )
    config = DFlashConfig(**{**fields, **overrides})
    config.check()
    config.validate_against(target_config)
    model = DFlashDraftModel(config)
    _init_(model, shape.init_std, torch.Generator().manual_seed(seed))
    return model.eval()


@dataclasses.dataclass(frozen=True)
class TinyPair:
    target: Path
    draft: Path


def sliding_drafter(layers: int, window: int) -> dict:
    """Drafter config fields for sliding-window layers, the last one full (as Qwen3.6 drafters)."""
    kinds = ("sliding_attention",) * (layers - 1) + ("full_attention",)
    return {"layer_types": kinds, "sliding_window": window}


def write_tiny_pair(
    out: str | Path, seed: int = 0, block_size: int = 16, shape: TinyShape = TinyShape(), **draft_fields
) -> TinyPair:
    out = Path(out)
    tokenizer = build_tokenizer()
    vocab = shape.vocab_size or -(-len(tokenizer) // 64) * 64
    target = tiny_target(shape, seed, vocab_size=vocab, eos_token_id=tokenizer.eos_token_id)
    target.generation_config.eos_token_id = tokenizer.eos_token_id
    target.save_pretrained(out / "target")
    tokenizer.save_pretrained(out / "target")
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    draft = tiny_draft(target.config, shape, seed + 1, block_size, mask_token_id=mask_id, **draft_fields)
    draft.save_pretrained(out / "draft")
    return TinyPair(out / "target", out / "draft")
