"""Where a chain server's drafts were, read back from its sampled completions.

A chain worker at temperature > 0 proposes point drafts (the plain drafter's argmax over the
target's lm_head) and emits, per verify step, the accepted drafts and one token of the target's
own. Given a completion, the engine-free drafter (drafter/reference.py's `propose`) says what the
server drafted at each block start, and a block goes on while the completion repeats its drafts.
So every position gets, from the tokens before it alone (a predictable state, which is all that
the likelihood-ratio martingales of law_statistics.py need to stay valid whatever the server did):

- `draft[t]`: the token drafted at position t, or -1 where none was (the prefill's token and the
  bonus after a fully accepted block);
- `bonus[t]`: position t follows B-1 accepted drafts (the target's own token, no draft);
- `in_block[t]`: position t is not the first of its block (a stale penalty shows there).

Where the server and this reading disagree (a near-tie in the drafter's argmax), the tests only
lose power, never validity.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.drafter.reference import propose


@dataclasses.dataclass
class BlockState:
    draft: torch.Tensor  # [n, L] long, -1 where no draft
    bonus: torch.Tensor  # [n, L] bool
    in_block: torch.Tensor  # [n, L] bool


@dataclasses.dataclass(frozen=True)
class ChainDrafter:
    """The drafter a chain server runs, engine-free, and the block size it verifies."""

    model: torch.nn.Module
    block_size: int

    def drafts(self, target, ids, hidden, at: int) -> torch.Tensor:
        features = target_features(hidden, self.model.config.target_layer_ids)
        return drafts_at(target, self, ids, features, at)


@dataclasses.dataclass(frozen=True)
class ConstantDrafter:
    """A drafter whose every draft is one token (law_case.constant_draft_pair's: its final norm is
    zero, so its logits are all zero and the argmax is token 0)."""

    token: int
    block_size: int

    def drafts(self, target, ids, hidden, at: int) -> torch.Tensor:
        return torch.full((self.block_size - 1,), self.token)


@torch.no_grad()
def read_blocks(
    target, drafter: ChainDrafter | ConstantDrafter, prompt: list[int], completions: list[list[int]]
) -> BlockState:
    rows = [read_one(target, drafter, prompt, c) for c in completions]
    return BlockState(*(torch.stack(column) for column in zip(*rows, strict=True)))


def read_one(target, drafter, prompt: list[int], completion: list[int]):
    length, block = len(completion), drafter.block_size
    draft = torch.full((length,), -1, dtype=torch.long)
    bonus = torch.zeros(length, dtype=torch.bool)
    in_block = torch.zeros(length, dtype=torch.bool)
    ids = torch.tensor([prompt + completion])
    hidden = target(ids, output_hidden_states=True).hidden_states
    start = 0  # completion index of the block's verified token
    while start + 1 < length:
        drafts = drafter.drafts(target, ids, hidden, len(prompt) + start)
        t = start + 1
        for i in range(block - 1):
            if t >= length:
                break
            draft[t], in_block[t] = drafts[i], i > 0
            if completion[t] != int(drafts[i]):
                break  # the target's correction: the next block starts on it
            t += 1
        else:  # every draft accepted: the target's bonus token, then the next block
            if t < length:
                bonus[t], in_block[t] = True, True
        start = t
    return draft, bonus, in_block


def drafts_at(target, drafter: ChainDrafter, ids, features, at: int) -> torch.Tensor:
    """The B-1 argmax drafts after the verified token at sequence position `at`."""
    logits, picked = propose_at(target, drafter, ids, features, at)
    return (picked if picked is not None else logits.argmax(-1))[0]


def draft_logits_at(target, drafter: ChainDrafter, ids, features, at: int, cache=None) -> torch.Tensor:
    """[B-1, V]: the drafter's logits after the verified token at sequence position `at`; a
    `cache` kept across calls at rising `at` holds the context already read (as dflash_generate's)."""
    return propose_at(target, drafter, ids, features, at, cache)[0][0]


def propose_at(target, drafter: ChainDrafter, ids, features, at: int, cache=None):
    model, block = drafter.model, drafter.block_size
    block_ids = torch.full((1, block), model.config.mask_token_id)
    block_ids[0, 0] = ids[0, at]
    positions = torch.arange(at, at + block).view(1, -1)
    cache = cache if cache is not None else DraftContextCache(model.config.num_hidden_layers)
    read = len(cache)  # context positions the cache holds already
    context = torch.arange(read, at).view(1, -1)
    return propose(target, model, block_ids, positions, features[:, read:at], context, cache)
