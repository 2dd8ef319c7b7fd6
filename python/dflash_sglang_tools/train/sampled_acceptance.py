"""Do sampled drafts pay? Engine-free, on the embedded trained pair (docs/sampled-drafts.md):

    python -m dflash_sglang_tools.train.sampled_acceptance [--drafter DIR] [--prompts 8] [--completions 2]

Point drafts against drafts sampled at the request's temperature, verified token by token by exact
rejection sampling (sampling/accept.py), and the sampled drafts verified as a block
(sampling/block_verify.py). Prints the tokens committed per verify step by block size and
temperature.
- The plain DFlash drafter (the pair's own): its argmax against a draw from its own law q.
- A DFlash2 drafter (`--drafter` with a candidate selector, e.g. the one `make tiny-dflash2`
  trains): its greedy walk against its sampled walk over the lattice (SGLang's `sample_path`,
  drafter/sampled_walk.py), q the walk's realised rows over the K candidates.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.sampled_walk import sampled_walk
from dflash_sglang.drafter.selector import walk_candidates
from dflash_sglang.sampling.accept import rejection_accept
from dflash_sglang.sampling.block_verify import block_rejection_accept

from . import data
from .tiny_pair import embedded_pair, held_out_prompts


def draft_outputs(target, draft, ids: torch.Tensor, at: int, block: int):
    """The drafter's logits [B-1, V] and final hidden states [B-1, H] for the block after the
    verified token at `at`."""
    hidden = target(ids, output_hidden_states=True).hidden_states
    features = target_features(hidden, draft.config.target_layer_ids)
    block_ids = torch.full((1, block), draft.config.mask_token_id)
    block_ids[0, 0] = ids[0, at]
    positions = torch.arange(at, at + block).view(1, -1)
    cache = DraftContextCache(draft.config.num_hidden_layers)
    embed = target.get_input_embeddings()
    out = draft(embed(block_ids), positions, features[:, :at], torch.arange(at).view(1, -1), cache)[0, 1:]
    return target.get_output_embeddings()(out), out


MODES = ("point", "sampled", "block")  # point drafts; sampled drafts, token by token or as a block


def drafts_and_q(draft, sampled: bool, logits, hidden, anchor: int, temperature: float, generator):
    """The drafts [B-1] and, when sampled, the law q [B-1, V] each was drawn from (given the
    drafts before it). DFlash2: the selector's greedy or sampled walk over its candidates."""
    selector = getattr(draft, "candidate_selector", None)
    if selector is None:
        q = torch.softmax(logits.float() / temperature, -1)
        if not sampled:
            return logits.argmax(-1), None
        return torch.multinomial(q, 1, generator=generator)[:, 0], q
    values, ids = torch.topk(logits.float(), selector.top_k, dim=-1)
    values, ids, hidden, anchor = values[None], ids[None], hidden[None], torch.tensor([anchor])
    if not sampled:
        return walk_candidates(selector, draft.config, values, ids, hidden, anchor)[0], None
    vocab = logits.shape[-1]  # top_k over the whole vocabulary: a sampled row, not a greedy one
    info = SimpleNamespace(temperatures=torch.tensor([[temperature]]), top_ks=torch.tensor([vocab]))
    uniforms = torch.rand((1, ids.shape[1]), generator=generator)
    drafts, proposal = sampled_walk(selector, draft.config, values, ids, hidden, anchor, info, uniforms)
    q = torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, ids[0], proposal.q[0].float())
    return drafts[0], q


def tokens_per_step(target, draft, prompt, temperature, block, mode, max_new, generator) -> float:
    sampled = mode != "point"
    seq = list(prompt)
    first = torch.softmax(target(torch.tensor([seq])).logits[0, -1].float() / temperature, -1)
    seq.append(int(torch.multinomial(first, 1, generator=generator)))
    steps = emitted = 0
    while len(seq) - len(prompt) < max_new:
        logits, hidden = draft_outputs(target, draft, torch.tensor([seq]), len(seq) - 1, block)
        drafts, q = drafts_and_q(draft, sampled, logits, hidden, seq[-1], temperature, generator)
        logits = target(torch.tensor([seq + drafts.tolist()])).logits[0, len(seq) - 1 :]
        p = torch.softmax(logits.float() / temperature, -1)
        if mode == "block":
            accepted = block_rejection_accept(drafts.view(1, -1), p[None], q[None], generator)
        else:
            q = None if q is None else q[None]
            accepted = rejection_accept(drafts.view(1, -1), p[None], q, generator)
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
    parser.add_argument("--drafter", help="a drafter for the pair's target (default: the pair's own)")
    args = parser.parse_args(argv)
    pair = embedded_pair()
    tokenizer = AutoTokenizer.from_pretrained(pair.target)
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    draft = DFlashDraftModel.from_pretrained(args.drafter or pair.draft)
    prompts = [data.prompt_ids(tokenizer, p) for p in held_out_prompts()[: args.prompts]]
    walk = draft.candidate_selector is not None
    point, sampled = ("greedy walk", "sampled walk") if walk else ("point drafts", "sampled drafts")
    print(
        f"| block | T | {point} | {sampled} | {sampled}, block verification | sampled / point "
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
