"""The embedded tiny pair: a small Qwen3 target and its DFlash drafter, trained on this machine.

    python -m dflash_sglang_tools.train.tiny_pair --out DIR [--stage target|drafter]

Steps 1-3 are the target stage (it saves DIR/target), 4-6 the drafter stage (it reads it back).

1. corpus: instruction/response pairs from the standard library's source (stdlib_corpus.py);
2. tokenizer: byte-level BPE trained on it (ChatML template, `<|MASK|>`, as testing/tiny.py);
3. target: a 4-layer Qwen3 trained as a causal LM on the chat-formatted pairs;
4. data for the drafter: the target's own greedy responses to the training prompts
   (`Plan.draft_prompts`: each in its own phrasing, or in all three);
5. drafter: the DFlash recipe (drafter.py) against the frozen target;
6. DIR/target, DIR/draft (published format), DIR/held_out.jsonl (the held-out pairs) and
   DIR/acceptance.json (greedy acceptance length on them at block sizes 4, 8 and 16).

Fixed seeds and a fixed thread count: one machine gives the same bytes on every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import jinja2
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang_tools import EMBEDDED_PAIR

from ..testing.tiny_dense import CHAT_TEMPLATE, MASK_TOKEN, TinyPair, build_tokenizer
from .causal_lm import train_causal_lm
from .data import encode_all, prompt_ids, read_jsonl
from .evaluate import acceptance
from .feature_cache import FeatureCache
from .loop import Schedule
from .recipe import DrafterRecipe, drafter_config, train_drafter
from .regenerate import regenerate
from .stdlib_corpus import build_corpus, every_instruction, write_jsonl

THREADS = 1  # also the fastest on a busy machine: idle OpenMP threads spin against other work
EVAL_BLOCK_SIZES = (4, 8, 16)
EMBEDDED = EMBEDDED_PAIR
HELD_OUT_FILE = "held_out.jsonl"  # the held-out pairs, one {"instruction", "response"} a line
ACCEPTANCE_FILE = "acceptance.json"  # what the build measured on them, and how it trained
TARGET_MINUTES_FILE = "target/minutes.txt"  # the target stage's time, for the drafter stage's report
STAGES = ("target", "drafter")


def embedded_pair(root: Path = EMBEDDED) -> TinyPair:
    """The pair shipped with the package (python/dflash_sglang/assets/tiny-pair)."""
    return TinyPair(root / "target", root / "draft")


def held_out_prompts(root: Path = EMBEDDED) -> list[str]:
    return [pair["instruction"] for pair in read_jsonl(root / HELD_OUT_FILE)]


@dataclasses.dataclass(frozen=True)
class Plan:
    vocab_size: int = 2048
    hidden_size: int = 128
    target_layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    max_length: int = 384
    target_epochs: int = 4
    target_lr: float = 3e-3
    target_tokens_per_batch: int = 4096
    regenerate_max_new_tokens: int = 256
    # The drafter's data: the target's responses to each function asked in its own phrasing (as
    # the target trained: "own_phrasing") or in every phrasing ("every_phrasing", 3x the data;
    # at 3 epochs level with own_phrasing at 8 by step 400 in the 2026-11-25 trials, not run on).
    draft_prompts: str = "own_phrasing"
    draft_layers: int = 2
    draft_intermediate_size: int = 384
    target_layer_ids: tuple[int, ...] = (0, 1, 2)
    block_size: int = 8
    train_block_sizes: tuple[int, ...] = (4, 8, 16)  # good at every --speculative-num-draft-tokens
    anchors: int = 64
    draft_epochs: int = 8
    draft_lr: float = 3e-3
    draft_tokens_per_batch: int = 4096
    draft_eval_every: int = 200  # steps between the periodic evaluations on `eval_prompts`
    # True: the target's features of the drafter's data computed once (feature_cache.py), not by
    # a target forward every step; worth it for a deep target and a shallow drafter.
    cache_target_features: bool = False
    train_pairs: int | None = None  # None: all of them (smaller for quick trials)
    draft_pairs: int | None = None  # the first this many of them make the drafter's data (None: all)
    eval_prompts: int = 12  # held-out prompts for the periodic evaluation (all at the end)
    eval_max_new_tokens: int = 96
    seed: int = 0


def drafter_instructions(pair: dict, plan: Plan) -> list[str]:
    if plan.draft_prompts == "every_phrasing":
        return every_instruction(pair)
    if plan.draft_prompts == "own_phrasing":
        return [pair["instruction"]]
    raise ValueError(f"Plan.draft_prompts: {plan.draft_prompts!r} is not every_phrasing or own_phrasing")


def chat_text(pair: dict) -> str:
    """The pair as the chat template writes it (the tokenizer does not exist yet)."""
    messages = [
        {"role": "user", "content": pair["instruction"]},
        {"role": "assistant", "content": pair["response"]},
    ]
    return jinja2.Template(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=False)


def make_target(plan: Plan, tokenizer) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=plan.vocab_size,
        hidden_size=plan.hidden_size,
        intermediate_size=plan.intermediate_size,
        num_hidden_layers=plan.target_layers,
        num_attention_heads=plan.heads,
        num_key_value_heads=plan.kv_heads,
        head_dim=plan.hidden_size // plan.heads,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        dtype="float32",
    )
    torch.manual_seed(plan.seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_target(target, tokenizer, target_dir: Path) -> None:
    target.save_pretrained(target_dir)
    tokenizer.save_pretrained(target_dir)


def load_target(target_dir: Path):
    return AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()


def build(
    out: Path,
    plan: Plan = Plan(),
    stages: tuple[str, ...] = STAGES,
    make_target=make_target,
    save_target=save_target,
    load_target=load_target,
) -> dict | None:
    """Both stages by default; `("target",)` stops after saving the target, `("drafter",)` reads it
    back from `out` (a build split in two: the drafter's plan can change without a new target).
    `make_target(plan, tokenizer)`, `save_target(target, tokenizer, dir)` and `load_target(dir)`:
    another target family (tiny_hybrid_pair.py)."""
    torch.set_num_threads(THREADS)
    started = time.monotonic()
    train_pairs, held_out = build_corpus()
    train_pairs = train_pairs[: plan.train_pairs]
    if "target" in stages:
        tokenizer = build_tokenizer(plan.vocab_size, [chat_text(p) for p in train_pairs])
        target = make_target(plan, tokenizer)
        target_schedule = Schedule(epochs=plan.target_epochs, lr=plan.target_lr, weight_decay=0.1)
        train_causal_lm(target, encode_all(tokenizer, train_pairs, plan.max_length), target_schedule,
                        plan.target_tokens_per_batch, tokenizer.pad_token_id, plan.seed)  # fmt: skip
        save_target(target, tokenizer, out / "target")
        target_minutes = round((time.monotonic() - started) / 60, 1)
        (out / TARGET_MINUTES_FILE).write_text(f"{target_minutes}\n")
    if "drafter" not in stages:
        return None
    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    target = load_target(out / "target")
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    eval_ids = [prompt_ids(tokenizer, p["instruction"]) for p in held_out]
    drafter_started = time.monotonic()

    asked = train_pairs[: plan.draft_pairs]
    prompts = [prompt_ids(tokenizer, text) for p in asked for text in drafter_instructions(p, plan)]
    examples = regenerate(target, prompts, plan.regenerate_max_new_tokens, eos, pad)
    regen_done = time.monotonic()

    torch.manual_seed(plan.seed + 1)
    mask_id = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    config = drafter_config(target.config, mask_id, plan.block_size, plan.draft_layers, plan.target_layer_ids,
                            plan.draft_intermediate_size)  # fmt: skip
    draft = DFlashDraftModel(config)
    recipe = DrafterRecipe(
        block_size=plan.block_size,
        train_block_sizes=plan.train_block_sizes,
        anchors=plan.anchors,
        tokens_per_batch=plan.draft_tokens_per_batch,
        seed=plan.seed,
        schedule=Schedule(epochs=plan.draft_epochs, lr=plan.draft_lr, eval_every=plan.draft_eval_every),
    )
    context = None
    if plan.cache_target_features:
        context = FeatureCache(target, examples, plan.target_layer_ids, plan.draft_tokens_per_batch, pad)
    history = train_drafter(target, draft, examples, recipe, eval_ids[: plan.eval_prompts],
                            plan.eval_max_new_tokens, pad, context)  # fmt: skip
    draft_done = time.monotonic()

    draft.eval().save_pretrained(out / "draft")
    measured = {
        str(b): round(acceptance(target, draft, eval_ids, b, plan.eval_max_new_tokens, [eos]).mean, 3)
        for b in EVAL_BLOCK_SIZES
    }
    write_jsonl(held_out, out / HELD_OUT_FILE)
    report = {
        "held_out_prompts": len(held_out),
        "max_new_tokens": plan.eval_max_new_tokens,
        "greedy_acceptance_length": measured,
        "drafter_evaluations": history,
        "minutes": {
            "target": float((out / TARGET_MINUTES_FILE).read_text()),
            "regenerate": round((regen_done - drafter_started) / 60, 1),
            "drafter": round((draft_done - regen_done) / 60, 1),
        },
        "plan": dataclasses.asdict(plan),
    }
    (out / ACCEPTANCE_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="directory for the pair")
    parser.add_argument("--stage", choices=STAGES, help="one stage only (default: both)")
    args = parser.parse_args(argv)
    report = build(args.out, stages=(args.stage,) if args.stage else STAGES)
    if report is None:
        return
    print(json.dumps({k: report[k] for k in ("greedy_acceptance_length", "minutes")}))


if __name__ == "__main__":
    main()
