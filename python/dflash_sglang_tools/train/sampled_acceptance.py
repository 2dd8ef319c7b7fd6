"""Do sampled drafts pay for the plain DFlash drafter? Engine-free, on the embedded trained pair
(docs/sampled-drafts.md):

    python -m dflash_sglang_tools.train.sampled_acceptance [--prompts 8] [--completions 2]

Point drafts (the drafter's argmax) against drafts sampled from the drafter's own law at the
request's temperature, verified token by token by exact rejection sampling (sampling/accept.py),
and the sampled drafts verified as a block (sampling/block_verify.py). Prints the tokens committed
per verify step by block size and temperature.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import propose
from dflash_sglang.sampling.accept import rejection_accept
from dflash_sglang.sampling.block_verify import block_rejection_accept

from . import data
from .tiny_pair import embedded_pair, held_out_prompts


def draft_logits(target, draft, ids: torch.Tensor, at: int, block: int) -> torch.Tensor:
    """The drafter's logits [B-1, V] for the block after the verified token at `at`."""
    hidden = target(ids, output_hidden_states=True).hidden_states
    features = target_features(hidden, draft.config.target_layer_ids)
    block_ids = torch.full((1, block), draft.config.mask_token_id)
    block_ids[0, 0] = ids[0, at]
    positions = torch.arange(at, at + block).view(1, -1)
    cache = DraftContextCache(draft.config.num_hidden_layers)
    logits, _ = propose(
        target, draft, block_ids, positions, features[:, :at], torch.arange(at).view(1, -1), cache
    )
    return logits[0]


MODES = ("point", "sampled", "block")  # point drafts; sampled drafts, token by token or as a block


def tokens_per_step(target, draft, prompt, temperature, block, mode, max_new, generator) -> float:
    sampled = mode != "point"
    seq = list(prompt)
    first = torch.softmax(target(torch.tensor([seq])).logits[0, -1].float() / temperature, -1)
    seq.append(int(torch.multinomial(first, 1, generator=generator)))
    steps = emitted = 0
    while len(seq) - len(prompt) < max_new:
        q_logits = draft_logits(target, draft, torch.tensor([seq]), len(seq) - 1, block)
        q = torch.softmax(q_logits.float() / temperature, -1)
        drafts = torch.multinomial(q, 1, generator=generator)[:, 0] if sampled else q_logits.argmax(-1)
        logits = target(torch.tensor([seq + drafts.tolist()])).logits[0, len(seq) - 1 :]
        p = torch.softmax(logits.float() / temperature, -1)
        if mode == "block":
            accepted = block_rejection_accept(drafts.view(1, -1), p[None], q[None], generator)
        else:
            accepted = rejection_accept(drafts.view(1, -1), p[None], q[None] if sampled else None, generator)
        n = int(accepted.lengths[0])
        seq += accepted.tokens[0, :n].tolist()
        steps, emitted = steps + 1, emitted + n
    return emitted / steps


@torch.no_grad()
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_sglang_tools.train.sampled_acceptance")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--completions", type=int, default=2)
    parser.add_argument("--max-new", type=int, default=48)
    args = parser.parse_args(argv)
    pair = embedded_pair()
    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    draft = DFlashDraftModel.from_pretrained(pair.draft)
    prompts = [data.prompt_ids(tokenizer, p) for p in held_out_prompts()[: args.prompts]]
    print(
        "| block | T | point drafts | sampled drafts | sampled, block verification | sampled / point "
        "| block verification / point |\n|---|---|---|---|---|---|---|"
    )
    for block in (4, 8):
        for temperature in (0.6, 1.0):
            means = []
            for mode in MODES:
                generator = torch.Generator().manual_seed(0)
                runs = [
                    tokens_per_step(target, draft, p, temperature, block, mode, args.max_new, generator)
                    for p in prompts
                    for _ in range(args.completions)
                ]
                means.append(sum(runs) / len(runs))
            point, sampled, as_block = means
            print(
                f"| {block} | {temperature} | {point:.2f} | {sampled:.2f} | {as_block:.2f} "
                f"| {sampled / point:.2f} | {as_block / point:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
