"""What the check runs at: Qwen3-8B + its published DFlash drafter on a GPU, tiny shapes on a CPU."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch

# z-lab/Qwen3-8B-DFlash-b16's config.json, as published (tests/test_config.py checks it parses).
QWEN3_8B_DRAFT: dict[str, Any] = {
    "architectures": ["DFlashDraftModel"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "block_size": 16,
    "bos_token_id": 151643,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "dtype": "bfloat16",
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "layer_types": ["full_attention"] * 5,
    "max_position_embeddings": 40960,
    "max_window_layers": 5,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 5,
    "num_key_value_heads": 8,
    "num_target_layers": 36,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# Qwen3-8B, as transformers.Qwen3Config keyword arguments.
QWEN3_8B_TARGET: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}

TINY_TARGET: dict[str, Any] = {
    **QWEN3_8B_TARGET,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1024,
}


def tiny_draft_config() -> dict[str, Any]:
    """The published drafter's config at TINY_TARGET's width: same format, same field paths."""
    raw = json.loads(json.dumps(QWEN3_8B_DRAFT))
    raw.update(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_target_layers=4, vocab_size=1024,
        layer_types=["full_attention"] * 2, max_window_layers=2,
    )  # fmt: skip
    raw["dflash_config"] = {"mask_token_id": 1023, "target_layer_ids": [0, 2]}
    return raw


@dataclasses.dataclass(frozen=True)
class Shapes:
    draft: dict[str, Any]  # the drafter's config.json
    target: dict[str, Any]  # Qwen3Config kwargs
    batches: tuple[int, ...]
    context: int  # committed positions in every KV cache
    requests: int  # acceptance batch (requests x block)
    dtype: torch.dtype
    iters: int
    warmup: int
    # The T > 0 table (t_positive.py): (vocabulary, drafter hidden size) pairs and batches.
    sampled_vocabs: tuple[tuple[int, int], ...] = ((1024, 64),)
    sampled_batches: tuple[int, ...] = (1, 2)

    @property
    def block_size(self) -> int:
        return self.draft["block_size"]

    @property
    def vocab(self) -> int:
        return self.target["vocab_size"]

    def summary(self) -> dict[str, Any]:
        return {
            "drafter": {k: self.draft[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size")},
            "target": {k: self.target[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")},
            "batches": list(self.batches),
            "context": self.context,
            "block_size": self.block_size,
            "acceptance_requests": self.requests,
            "iters": self.iters,
            "warmup": self.warmup,
            "sampled_vocabs": [list(v) for v in self.sampled_vocabs],
            "sampled_batches": list(self.sampled_batches),
        }


# The T > 0 table on a GPU: Qwen3's vocabulary with an 8B drafter's width, then the seed models'.
GPU_SAMPLED_VOCABS = ((151936, 4096), (248320, 5120))


def gpu_shapes(iters: int = 20, warmup: int = 5) -> Shapes:
    return Shapes(
        QWEN3_8B_DRAFT, QWEN3_8B_TARGET, (1, 8, 32), 512, 48, torch.bfloat16, iters, warmup,
        sampled_vocabs=GPU_SAMPLED_VOCABS, sampled_batches=(1, 8, 32, 64),
    )  # fmt: skip


def cpu_shapes(iters: int = 3, warmup: int = 1) -> Shapes:
    """Small enough for CI on a shared CPU core: the code runs, the numbers mean nothing."""
    return Shapes(tiny_draft_config(), TINY_TARGET, (1, 2), 32, 4, torch.float32, iters, warmup)
