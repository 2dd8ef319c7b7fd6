"""Train a DFlash drafter for a transformers causal-LM target.

    python -m dflash_sglang_tools.train --target DIR --out DIR [--data FILE.jsonl] [--block-size 8] ...

Data: one `{"instruction": ..., "response": ...}` a line; without --data, the standard library
corpus (stdlib_corpus.py) and its held-out split. --regenerate N replaces every response by the
target's own greedy one (up to N tokens), as the paper does. The drafter is written to --out in
the published format (config.json + model.safetensors), ready for --speculative-draft-model-path.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.model import DFlashDraftModel

from ..testing.tiny_dense import MASK_TOKEN
from .data import encode_all, prompt_ids, read_jsonl
from .loop import Schedule
from .recipe import DrafterRecipe, drafter_config, train_drafter
from .regenerate import regenerate
from .stdlib_corpus import build_corpus


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="transformers causal LM directory (or hub id)")
    p.add_argument("--out", required=True, type=Path, help="directory for the drafter")
    p.add_argument("--data", help="training pairs (.jsonl); default: the stdlib corpus")
    p.add_argument("--eval-data", help="held-out pairs (.jsonl); default: the last --eval-prompts of --data")
    p.add_argument("--eval-prompts", type=int, default=8, help="held-out prompts for the acceptance eval")
    p.add_argument("--eval-every", type=int, default=200, help="steps between evaluations (0: at the end)")
    p.add_argument("--eval-max-new-tokens", type=int, default=64)
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--train-block-sizes", help="comma-separated sizes the steps cycle through")
    p.add_argument("--draft-layers", type=int, default=1)
    p.add_argument("--target-layer-ids", help="comma-separated; default: spread over the target")
    p.add_argument("--mask-token-id", type=int, help=f"default: {MASK_TOKEN}, else the first unused row")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup-ratio", type=float, default=0.04)
    p.add_argument("--gamma", type=float, help="loss decay exp(-(k-1)/gamma); default by block size")
    p.add_argument("--anchors", type=int, default=512, help="blocks per sequence, at most")
    p.add_argument("--tokens-per-batch", type=int, default=8192)
    p.add_argument("--max-length", type=int, default=3072)
    p.add_argument("--regenerate", type=int, default=0, help="regenerate responses, N new tokens at most")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def int_list(text: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",")) if text else ()


def mask_token_id(tokenizer, vocab_size: int, override: int | None) -> int:
    """`<|MASK|>` when the tokenizer has it; else the first embedding row past the tokenizer
    (published Qwen3 drafters use such a padded row); never an existing token like pad or eos."""
    if override is not None:
        return override
    if MASK_TOKEN in tokenizer.get_vocab():
        return tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    if len(tokenizer) < vocab_size:
        return len(tokenizer)
    raise SystemExit("the tokenizer has no <|MASK|> and no spare embedding row: pass --mask-token-id")


def load_pairs(args) -> tuple[list[dict], list[dict]]:
    if args.data is None:
        train, held_out = build_corpus()
    else:
        train = read_jsonl(args.data)
        held_out = read_jsonl(args.eval_data) if args.eval_data else train[-args.eval_prompts :]
        train = train if args.eval_data else train[: -args.eval_prompts]
    return train, held_out[: args.eval_prompts]


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).to(device).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    train_pairs, held_out = load_pairs(args)
    if args.regenerate:
        prompts = [prompt_ids(tokenizer, p["instruction"]) for p in train_pairs]
        examples = regenerate(target, prompts, args.regenerate, tokenizer.eos_token_id, pad)
    else:
        examples = encode_all(tokenizer, train_pairs, args.max_length)

    layer_ids = int_list(args.target_layer_ids) or None
    mask_id = mask_token_id(tokenizer, target.config.vocab_size, args.mask_token_id)
    config = drafter_config(target.config, mask_id, args.block_size, args.draft_layers, layer_ids)
    draft = DFlashDraftModel(config).to(device)
    recipe = DrafterRecipe(
        block_size=args.block_size,
        anchors=args.anchors,
        gamma=args.gamma,
        train_block_sizes=int_list(args.train_block_sizes),
        tokens_per_batch=args.tokens_per_batch,
        seed=args.seed,
        schedule=Schedule(epochs=args.epochs, lr=args.lr, warmup_ratio=args.warmup_ratio,
                          eval_every=args.eval_every),
    )  # fmt: skip
    eval_ids = [prompt_ids(tokenizer, p["instruction"]) for p in held_out]
    history = train_drafter(target, draft, examples, recipe, eval_ids, args.eval_max_new_tokens, pad)
    draft.float().cpu().save_pretrained(args.out)
    record = {"args": vars(args), "evaluations": history, "eval_prompt_ids": eval_ids}
    (args.out / "training.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"drafter: {args.out}")


if __name__ == "__main__":
    main()
