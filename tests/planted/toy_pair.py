"""A toy pair for engine-free law runs: a bigram target, a drafter guessing along its argmax path.

The chain's law case (tests/server/law_case.py) runs the trained pair's transformers on CPU,
about 8 s a setting to decode and as many to judge. The planted classes (bug_classes.py) need
dozens of runs in CI, so they decode this pair as well, through the same verify code
(decode.py): the target's logits after a token are one row of a fixed random matrix (a bigram
model over V tokens, scaled so that its laws are about as uncertain as the trained target's: at
T 1 an entropy of 1.7 nats and a median top token of 0.5, against 1.5 and 0.56), and the
drafter's logits at block position i after the verified token y are the log of the target's law
there along the argmax path from y (T 1, unfiltered) plus fixed noise, so it drafts the target's
likely tokens, accepted about as often as the trained drafter's (the first draft 52-62% of steps,
the second 20-25%, the third 6-7%, at law_matrix.SETTINGS; the trained pair's 35-47%, 15-27%,
6-16%). Everything is a table lookup: a run of the chain's law case
(four settings, 64 x 24 + 512 x 4 completions each) decodes and is judged in seconds.

Both objects have the trained pair's interface where the judge and decode.py read them: the
target is called on ids and answers `.logits` (law_matrix.target_logits), the drafter has a
`block_size`, `logits_after` and `drafts` (law_drafts.read_blocks).
"""

from __future__ import annotations

import dataclasses
import types

import torch

VOCAB = 64
SCALE = 3.0  # the bigram logits' standard deviation
TOY_NOISE = 1.5  # the drafter's error, in logits
PROMPT = [7, 3, 11]


class ToyTarget:
    """Logits of the token after each position: row ids[t] of a fixed [V, V] matrix."""

    def __init__(self, seed: int = 0, vocab: int = VOCAB):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(vocab, vocab, generator=g, dtype=torch.float64) * SCALE
        self.vocab = vocab

    def __call__(self, ids: torch.Tensor, output_hidden_states: bool = False, **_) -> types.SimpleNamespace:
        return types.SimpleNamespace(logits=self.table[ids], hidden_states=None)

    def along_greedy_path(self, steps: int) -> torch.Tensor:
        """[steps, V, V]: after each token y, the law i + 1 tokens ahead (T 1, unfiltered) given
        that the tokens between followed the argmax path from y (what a drafter that predicts a
        block at once guesses: right while the drafts are the likeliest tokens)."""
        step = torch.softmax(self.table, -1)
        path, laws = torch.arange(self.vocab), []
        for _ in range(steps):
            laws.append(step[path])
            path = step[path].argmax(-1)
        return torch.stack(laws)


@dataclasses.dataclass(frozen=True)
class ToyDrafter:
    """The drafter's logits [B-1, V] after a verified token: log marginal + fixed noise."""

    table: torch.Tensor  # [V, B-1, V] logits by verified token
    block_size: int

    def logits_after(
        self, target, prompt: list[int], completion: list[int], starts: list[int]
    ) -> torch.Tensor:
        """[len(starts), B-1, V]: after the verified token at each completion index in `starts`."""
        tokens = torch.tensor([completion[s] for s in starts], dtype=torch.long)
        return self.table[tokens]

    def step_logits(self, target, seqs: list[list[int]]) -> torch.Tensor:
        """[n, B-1, V]: after each sequence's last token (decode.py's drafting)."""
        return self.table[torch.tensor([seq[-1] for seq in seqs])]

    def drafts(self, target, ids, hidden, at: int) -> torch.Tensor:
        """The argmax drafts after the token at sequence position `at` (law_drafts.read_blocks)."""
        return self.table[int(ids[0, at])].argmax(-1)


def toy_case(seed: int = 0, block_size: int = 4, noise: float = TOY_NOISE):
    """(target, drafter, prompt): the toy pair of `seed`."""
    target = ToyTarget(seed)
    g = torch.Generator().manual_seed(seed + 1)
    shape = (target.vocab, block_size - 1, target.vocab)
    guess = target.along_greedy_path(block_size - 1).permute(1, 0, 2)  # [V, B-1, V]
    table = guess.clamp_min(1e-30).log() + noise * torch.randn(shape, generator=g, dtype=torch.float64)
    return target, ToyDrafter(table, block_size), list(PROMPT)
