"""Where each token of a completion sat in its verify step: the acceptance pattern, as the judge
reads it (law_joint.py).

A chain step commits m tokens (1 <= m <= n + 1 for n drafts judged): m - 1 accepted drafts and one
token of the target's own (the correction after a rejection, or the bonus after all n). A
completion's steps are its list of m's (`Steps.counts`): the decode's own record engine-free
(tests/planted/decode.py), a server's step record (step/step_record.py, by request id), or, for
point drafts, read back from the tokens (law_drafts.read_blocks). Given the steps, position t has
a block start s (the index of the step's verified token), a block position i = t - s, and a past:
every position s + 1 .. t - 1 was an accepted draft. The judge uses only that past: under a
right verify, token t given its prefix AND the pattern before it follows p_t (for token-wise and
block verification alike: docs/reliability.md), so a pattern that is wrong (a misread near-tie)
costs power, never validity.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import torch

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.step.step_record import RECORD_ENV

from .law_drafts import BlockState, draft_logits_at


@dataclasses.dataclass(frozen=True)
class Steps:
    """One completion's verify steps: tokens each committed, drafts each judged (None: B - 1)."""

    counts: list[int]
    drafts: list[int] | None = None


@dataclasses.dataclass(frozen=True)
class Places:
    """Per completion position [L] (long): the step (-1: the prefill's token, or past the record),
    the block start s, the block position i (0 for the prefill's token), the drafts n judged."""

    step: torch.Tensor
    start: torch.Tensor
    position: torch.Tensor
    drafts: torch.Tensor


def places(steps: Steps | None, length: int, block: int) -> Places:
    step = torch.full((length,), -1, dtype=torch.long)
    start, position = torch.zeros_like(step), torch.zeros_like(step)
    drafts = torch.full_like(step, block - 1)
    if steps is not None:
        s = 0
        for k, m in enumerate(steps.counts):
            n = block - 1 if steps.drafts is None else steps.drafts[k]
            for i in range(1, m + 1):
                if s + i < length:
                    step[s + i], start[s + i], position[s + i], drafts[s + i] = k, s, i, n
            s += m
            if s + 1 >= length:
                break
    return Places(step, start, position, drafts)


def steps_from_blocks(state: BlockState) -> list[Steps]:
    """Point drafts read back (law_drafts.read_blocks): a block's first position has no
    in-block flag, so the steps' counts are the gaps between those (the last one cut at L)."""
    out = []
    for in_block in state.in_block:
        firsts = [t for t in range(1, len(in_block)) if not bool(in_block[t])] + [len(in_block)]
        out.append(Steps([b - a for a, b in zip(firsts, firsts[1:], strict=False)]))
    return out


def recorded_steps(server, ids: list[str] | None) -> list[Steps | None] | None:
    """Each request's steps from the server's step record (its TP rank 0 file), where the server
    was started with one (step_records.record_env); None without one."""
    base = getattr(server, "env", {}).get(RECORD_ENV)
    path = Path(f"{base}.tp0.jsonl") if base else None
    if ids is None or path is None or not path.exists():
        return None
    return steps_from_record([json.loads(line) for line in path.read_text().splitlines()], ids)


def steps_from_record(records: list[dict], ids: list[str]) -> list[Steps | None]:
    """A server's step record (tests/server/step_records.read_steps) for the requests `ids` (None:
    a request it never saw)."""
    by_id: dict[str, tuple[list[int], list[int]]] = {rid: ([], []) for rid in ids}
    for line in records:
        for rid, length, accepted in zip(
            line["rids"], line["target"]["lengths"], line["accepted"], strict=True
        ):
            if rid in by_id:
                by_id[rid][0].append(int(accepted))
                by_id[rid][1].append(int(length) - 1)
    return [Steps(*by_id[rid]) if by_id[rid][0] else None for rid in ids]


@torch.no_grad()
def draft_logits(
    target, drafter, prompt: list[int], completion: list[int], starts: list[int]
) -> torch.Tensor:
    """[len(starts), B-1, V] float64: the drafter's logits after the verified token at each
    completion index of `starts` (rising): the toy drafter's lookup, or the chain's drafter
    engine-free (the context read once, as law_sampled.block_laws does)."""
    chain = getattr(drafter, "chain", drafter)  # a law_sampled.SampledDrafter's own
    if hasattr(chain, "logits_after"):
        return chain.logits_after(target, prompt, completion, starts).double()
    ids = torch.tensor([prompt + completion])
    hidden = target(ids, output_hidden_states=True).hidden_states
    features = target_features(hidden, chain.model.config.target_layer_ids)
    cache = DraftContextCache(chain.model.config.num_hidden_layers)
    rows = [draft_logits_at(target, chain, ids, features, len(prompt) + s, cache) for s in starts]
    return torch.stack(rows).double()


@dataclasses.dataclass
class Group:
    """Completions of one setting from one batch, in order, as law_joint.py judges them.
    `q(row, starts)`: [len(starts), B-1, V] the drafter's law after those block starts (sampled
    drafts); `drafts` [n, L]: the point drafts read back (-1: none); neither: no q features."""

    target: torch.Tensor  # [n, L, V] the tested law
    tokens: torch.Tensor  # [n, L]
    usable: torch.Tensor  # [n, L] bool
    steps: list[Steps] | None
    block: int
    q: Callable[[int, list[int]], torch.Tensor] | None = None
    drafts: torch.Tensor | None = None
    token_wise: bool = True  # False: block verification (law_coins.py reads token-wise coins)


def joint_group(law, model, drafter, prompt, completions, params, tested, steps, state) -> Group:
    """The Group of `completions` (tested: law_matrix.tested's tokens, target and usable). A
    law_sampled.SampledDrafter gives q, the request's law over its logits (no penalty: the
    target's alone); point drafts give their BlockState (`state`), whose steps stand in where no
    record was made; no drafter gives the steps alone (where a record was made)."""
    tokens, target, usable = tested
    block = getattr(drafter, "block_size", 4)
    if state is not None:
        return Group(target, tokens, usable, steps or steps_from_blocks(state), block, drafts=state.draft)
    if drafter is None or steps is None:
        return Group(target, tokens, usable, steps, block)
    proposal = {key: value for key, value in params.items() if key != "frequency_penalty"}

    memo: dict[tuple, torch.Tensor] = {}  # completions that share their first blocks share q there

    def q(row: int, starts: list[int]) -> torch.Tensor:
        seen = tuple(completions[row][: max(starts) + 1])  # what the drafter reads, causal
        if (seen, tuple(starts)) not in memo:
            logits = draft_logits(model, drafter, prompt, list(seen), starts)
            memo[(seen, tuple(starts))] = law(
                logits, torch.zeros(logits.shape[:2], dtype=torch.long), proposal
            )
        return memo[(seen, tuple(starts))]

    return Group(target, tokens, usable, steps, block, q=q, token_wise=not drafter.block_verified)
