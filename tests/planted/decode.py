"""The chain's sampled decoding, engine-free, through the package's own draw and verify, with each
step's acceptance recorded: what a server's chain law test samples, on any pair.

simulate.py decodes the trained pair with point or sampled drafts; this adds block verification
and the pattern (law_pattern.Steps: the tokens each step committed, what a server's step record
holds) and takes the toy pair too (toy_pair.py). Each step, for the batch's active requests: the
drafter's logits after the last token, then by `path`

    point    the argmax drafts (the plain drafter at DFLASH_SGLANG_SAMPLED_DRAFTS=0)
    sampled  drafts drawn from q (sampling/sampled_drafts.py's draw_drafts), judged token by token
    block    the same drafts judged as one block (SGLang's --speculative-use-block-verification)

then the target's rows over [verified token, drafts], the penalties at every block position
(sampling/penalties.py), and sampling/sampled_verify.py's `sampled_accept`. Every one of those is
called through its module, so bug_classes.py can plant into the very functions a server runs.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_sglang.drafter.context import target_features
from dflash_sglang.sampling import sampled_drafts, sampled_verify

from ..server.law_drafts import draft_logits_at
from ..server.law_matrix import law
from ..server.law_pattern import Steps
from .simulate import padded, penalise, sampling_info

PATHS = ("point", "sampled", "block")


@dataclasses.dataclass
class Decoded:
    completions: list[list[int]]
    steps: list[Steps]


@torch.no_grad()
def decode(
    target, drafter, prompt: list[int], params: dict, n: int, max_new: int, path: str, generator
) -> Decoded:
    """n completions of `max_new` tokens of one prompt under `params`, decoded as one batch."""
    block = drafter.block_size
    first_logits = target(torch.tensor([prompt])).logits[:, -1:].double().expand(n, 1, -1)
    first_law = law(first_logits, torch.zeros(n, 1, dtype=torch.long), params)[:, 0]
    done = [[int(t)] for t in torch.multinomial(first_law, 1, generator=generator)[:, 0]]
    counts: list[list[int]] = [[] for _ in range(n)]
    while True:
        active = [r for r in range(n) if len(done[r]) < max_new]
        if not active:
            return Decoded(done, [Steps(c) for c in counts])
        seqs = [prompt + done[r] for r in active]
        info = sampling_info(params, len(seqs))
        q_logits = step_draft_logits(drafter, target, seqs).float()  # [bs, B-1, V]
        vocab = q_logits.shape[-1]
        proposal = None
        if path == "point":
            drafts = q_logits.argmax(-1)
        else:
            drafts, proposal = sampled_drafts.draw_drafts(
                q_logits, lambda x: x, info, vocab, generator=generator
            )
        full = [seq + drafts[r].tolist() for r, seq in enumerate(seqs)]
        logits = target(padded(full)).logits.float()
        at = torch.tensor([len(seq) - 1 for seq in seqs])
        rows = logits[torch.arange(len(seqs)).unsqueeze(1), at.unsqueeze(1) + torch.arange(block)]
        verified = torch.cat([torch.tensor([[seq[-1]] for seq in seqs]), drafts], dim=1)
        penalise(rows, verified, [done[r] for r in active], params)
        result = sampled_verify.sampled_accept(
            drafts, rows.reshape(len(seqs) * block, -1), info, block, generator=generator,
            proposal=proposal, block_verification=path == "block",
        )  # fmt: skip
        for r, i in enumerate(active):
            length = int(result.lengths[r])
            counts[i].append(length)
            done[i] = (done[i] + result.tokens[r, :length].tolist())[:max_new]


def step_draft_logits(drafter, target, seqs: list[list[int]]) -> torch.Tensor:
    """[n, B-1, V]: the drafter's logits after each sequence's last token (the toy's lookup, or the
    chain's drafter over the target's features, as simulate.draw reads them)."""
    if hasattr(drafter, "step_logits"):
        return drafter.step_logits(target, seqs)
    chain = getattr(drafter, "chain", drafter)
    ids = padded(seqs)
    hidden = target(ids, output_hidden_states=True).hidden_states
    rows = []
    for r, seq in enumerate(seqs):
        features = target_features(tuple(h[r : r + 1] for h in hidden), chain.model.config.target_layer_ids)
        rows.append(draft_logits_at(target, chain, ids[r : r + 1], features, len(seq) - 1))
    return torch.stack(rows)
