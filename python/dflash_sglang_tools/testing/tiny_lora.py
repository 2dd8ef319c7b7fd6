"""A tiny PEFT LoRA adapter for a tiny target, written as `peft` would save it, for LoRA tests.

    write_tiny_lora(pair.target, out_dir, rank=4, seed=3)

Random A and B on q_proj and v_proj of every layer, B large enough that the adapted target's
greedy output differs from the base target's (a test that it does keeps the check from being
vacuous). No `peft` import: the format is two files, adapter_config.json and
adapter_model.safetensors with keys `base_model.model.model.layers.N.self_attn.{q,v}_proj.lora_{A,B}.weight`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

TARGET_MODULES = ("q_proj", "v_proj")


def write_tiny_lora(
    target_dir, out_dir, rank: int = 4, alpha: int = 8, seed: int = 3, std: float = 0.3
) -> Path:
    config = AutoConfig.from_pretrained(target_dir)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    out_features = {
        "q_proj": config.num_attention_heads * head_dim,
        "v_proj": config.num_key_value_heads * head_dim,
    }
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for module in TARGET_MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            a = torch.randn(rank, config.hidden_size, generator=generator) * std
            b = torch.randn(out_features[module], rank, generator=generator) * std
            tensors[f"{prefix}.lora_A.weight"], tensors[f"{prefix}.lora_B.weight"] = a, b
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(target_dir),
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(TARGET_MODULES),
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    return out


@torch.no_grad()
def merge_lora(model, adapter_dir) -> None:
    """Fold an adapter written by write_tiny_lora into a transformers model: W += alpha / r * B @ A
    (PEFT's LoRA), so the merged model's logits are the adapted target's law."""
    adapter_dir = Path(adapter_dir)
    adapter_config = json.loads((adapter_dir / "adapter_config.json").read_text())
    scale = adapter_config["lora_alpha"] / adapter_config["r"]
    tensors = load_file(str(adapter_dir / "adapter_model.safetensors"))
    for key, a in tensors.items():
        if key.endswith(".lora_A.weight"):
            prefix = key[: -len(".lora_A.weight")]
            b = tensors[f"{prefix}.lora_B.weight"]
            module = model.get_submodule(prefix.removeprefix("base_model.model."))
            module.weight += (scale * b.double() @ a.double()).to(module.weight.dtype)
