"""The embedded tiny hybrid pair: a small Qwen3.5-style target and its DFlash drafter, trained here.

    python -m dflash_sglang_tools.train.tiny_hybrid_pair --out DIR [--stage target|drafter]

tiny_pair.py's recipe and code (corpus, tokenizer, the target's causal-LM training, the target's
own responses as the drafter's data, the DFlash recipe, the held-out measurement), with another
target: a text-only `Qwen3_5ForCausalLM` of 4 layers, 3 Gated DeltaNet linear attention layers
and 1 gated full attention layer (`full_attention_interval` 4), written as SGLang loads it
(testing/tiny_hybrid.py). The linear heads are 32 wide: SGLang's Triton GDN kernels need K >= 32.
The drafter reads target layers (0, 1, 2). transformers runs the delta rule in torch on CPU.

DIR/target, DIR/draft, DIR/held_out.jsonl and DIR/acceptance.json as tiny_pair.py writes them;
launch/tiny-hybrid-cpu.sh serves the shipped pair (python/dflash_sglang/assets/tiny-hybrid-pair).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from dflash_sglang_tools import EMBEDDED_PAIR

from ..testing.tiny_dense import TinyPair
from ..testing.tiny_hybrid import HybridShape, hybrid_target_class, hybrid_target_config, save_hybrid_target
from .tiny_pair import STAGES, Plan, build

EMBEDDED_HYBRID = EMBEDDED_PAIR.parent / "tiny-hybrid-pair"


@dataclasses.dataclass(frozen=True)
class HybridPlan(Plan):
    full_attention_interval: int = 4  # 4 layers: linear, linear, linear, full
    linear_key_heads: int = 2
    linear_value_heads: int = 4
    linear_head_dim: int = 32
    conv_kernel: int = 4


def embedded_hybrid_pair(root: Path = EMBEDDED_HYBRID) -> TinyPair:
    """The hybrid pair shipped with the package (python/dflash_sglang/assets/tiny-hybrid-pair)."""
    return TinyPair(root / "target", root / "draft")


def shape_of(plan: HybridPlan) -> HybridShape:
    return HybridShape(
        vocab_size=plan.vocab_size,
        hidden_size=plan.hidden_size,
        target_layers=plan.target_layers,
        draft_layers=plan.draft_layers,
        num_features=len(plan.target_layer_ids),
        heads=plan.heads,
        kv_heads=plan.kv_heads,
        head_dim=plan.hidden_size // plan.heads,
        intermediate_size=plan.intermediate_size,
        full_attention_interval=plan.full_attention_interval,
        linear_key_heads=plan.linear_key_heads,
        linear_value_heads=plan.linear_value_heads,
        linear_head_dim=plan.linear_head_dim,
        conv_kernel=plan.conv_kernel,
    )


def make_hybrid_target(plan: HybridPlan, tokenizer):
    """Initialised as transformers does (std 0.02), not testing's large random weights."""
    config = hybrid_target_config(shape_of(plan), plan.vocab_size, tokenizer.eos_token_id)
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(plan.seed)
    model = hybrid_target_class(shape_of(plan))(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


class ReplayRollback:
    """A hybrid target the engine-free reference can verify chains with: transformers cannot crop a
    recurrent state, so the cache's `crop` after a verify restores the state from before that
    forward and runs the kept tokens again (one more forward a step). Everything else delegates."""

    def __init__(self, target) -> None:
        self.target = target
        self._before = None  # (cache layers before the last cached forward, its ids, its positions)

    def __getattr__(self, name: str):
        return getattr(self.target, name)

    def __call__(self, input_ids=None, past_key_values=None, **kwargs):
        if past_key_values is not None:
            self._before = (copy.deepcopy(past_key_values.layers), input_ids, kwargs.get("position_ids"))
        out = self.target(input_ids=input_ids, past_key_values=past_key_values, **kwargs)
        cache = getattr(out, "past_key_values", None)
        if cache is not None and "crop" not in vars(cache):
            cache.crop = functools.partial(self._crop, cache)
        return out

    def _crop(self, cache, tokens: int) -> None:
        layers, ids, positions = self._before
        keep = ids.shape[1] + tokens if tokens < 0 else tokens
        cache.layers[:] = layers
        if keep > 0:
            kept = None if positions is None else positions[:, :keep]
            self.target(input_ids=ids[:, :keep], position_ids=kept, past_key_values=cache, use_cache=True)


def load_hybrid_target(target_dir: Path) -> ReplayRollback:
    return ReplayRollback(AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval())


def hybrid_build(out: Path, plan: HybridPlan = HybridPlan(), stages: tuple[str, ...] = STAGES) -> dict | None:
    def save(target, tokenizer, target_dir: Path) -> None:
        save_hybrid_target(target, tokenizer, target_dir, plan.full_attention_interval)

    hooks = dict(make_target=make_hybrid_target, save_target=save, load_target=load_hybrid_target)
    return build(out, plan, stages, **hooks)


def main(argv=None, default: HybridPlan = HybridPlan(), doc: str = __doc__) -> None:
    """The command line of this pair, or of another hybrid pair's plan (seed_hybrid_pair.py)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the pair")
    parser.add_argument("--stage", choices=STAGES, help="one stage only (default: both)")
    parser.add_argument("--draft-epochs", type=int, default=default.draft_epochs)
    args = parser.parse_args(argv)
    plan = dataclasses.replace(default, draft_epochs=args.draft_epochs)
    report = hybrid_build(args.out, plan, stages=(args.stage,) if args.stage else STAGES)
    if report is None:
        return
    print(json.dumps({k: report[k] for k in ("greedy_acceptance_length", "minutes")}))


if __name__ == "__main__":
    main()
