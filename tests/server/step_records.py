"""What reached the target, read back from a server's step record (step/step_record.py), and the
checks the server tests make of it.

The verify policy's bugs keep every output exact, so these read what each decode step handed the
target, not what the policy says it did:
- `assert_the_target_saw_what_the_policy_chose`: the verify was ragged exactly when the policy chose
  per-request lengths, each request verified the length chosen for it, the policy recorded each
  request's acceptance against that length, and no request committed more than it verified;
- `assert_each_step_accepted_what_the_reference_does`: each greedy request's steps, at the lengths
  the record says it verified, committed what an engine-free drafter commits at those lengths when
  it has seen the target features of every committed position (`replayed_acceptance`): a drafter
  missing a plain step's context (its deferred injection lost or late, step/deferred_context.py)
  drafts from other context and accepts other counts.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import torch

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.drafter.reference import propose
from dflash_sglang.step.step_record import RECORD_ENV

from .pairs import load


def record_env(folder: Path) -> dict:
    """The server environment that records every step under `folder` (one file a TP rank)."""
    return {RECORD_ENV: str(folder / "steps")}


def read_steps(folder: Path, rank: int = 0) -> list[dict]:
    path = folder / f"steps.tp{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_the_target_saw_what_the_policy_chose(steps: list[dict]) -> None:
    assert steps, "no decode step recorded"
    for n, step in enumerate(steps):
        chose, target, size = step["chose"], step["target"], len(step["rids"])
        where = f"step {n} of {len(steps)}: " + str({k: v for k, v in step.items() if k != "rids"})
        # Ragged exactly where the policy chose each request its own length.
        assert target["layout"] == ("whole" if chose["lengths"] is None else "ragged"), where
        assert target["lengths"] == (chose["lengths"] or [chose["width"]] * size), where
        if step["recorded"] is not None:  # the acceptance is paired with what was verified
            assert step["recorded"] == target["lengths"], where
        assert all(1 <= a <= n for a, n in zip(step["accepted"], target["lengths"], strict=True)), where


def steps_by_request(steps: list[dict]) -> dict[str, list[tuple[int, int]]]:
    """Each request's (verified length, tokens committed) step by step."""
    out = defaultdict(list)
    for step in steps:
        for rid, length, accepted in zip(
            step["rids"], step["target"]["lengths"], step["accepted"], strict=True
        ):
            out[rid].append((length, accepted))
    return out


def drafted_after_plain(steps: list[dict]) -> int:
    """Drafted steps that came right after a plain step of the same request: the drafter read the
    context the plain step held (step/deferred_context.py)."""
    return sum(
        before == 1 < after
        for ran in steps_by_request(steps).values()
        for (before, _), (after, _) in itertools.pairwise(ran)
    )


def assert_each_step_accepted_what_the_reference_does(pair, steps, served, block: int) -> int:
    """`served`: (prompt ids, the server's response) of greedy requests; every step each of them ran
    commits what `replayed_acceptance` does at its verified lengths. Returns the steps checked."""
    by_request, checked = steps_by_request(steps), 0
    for prompt, out in served:
        ran = by_request[out["meta_info"]["id"]]
        assert ran, f"request {out['meta_info']['id']} not in the step record"
        widths = [length for length, _ in ran]
        want = replayed_acceptance(pair, prompt, out["output_ids"], widths, block)
        assert [accepted for _, accepted in ran] == want, (widths, ran, want)
        checked += len(ran)
    return checked


@torch.no_grad()
def greedy_continuation(target, prompt: list[int], count: int) -> list[int]:
    """The target's argmax tokens after `prompt`, stop tokens included (a commit ignores them)."""
    ids, cache, tokens = torch.tensor([prompt]), None, []
    for _ in range(count):
        out = target(ids, past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        tokens.append(int(out.logits[0, -1].argmax()))
        ids = torch.tensor([[tokens[-1]]])
    return tokens


@torch.no_grad()
def replayed_acceptance(pair, prompt: list[int], output: list[int], widths: list[int], block: int):
    """The tokens each step commits, engine-free, when step k verifies the first `widths[k]`
    positions of the block [last token, B-1 drafts] (width 1: plain decoding, nothing drafted) and
    the drafter reads the target features of every committed position, as the reference's does."""
    _, target, draft = load(pair.target, pair.draft)
    greedy = greedy_continuation(target, prompt, len(output) + block)
    assert greedy[: len(output)] == output, "the server's output is not the target's greedy output"
    hidden = target(torch.tensor([prompt + greedy]), output_hidden_states=True).hidden_states
    features = target_features(hidden, draft.config.target_layer_ids)  # causal: any prefix's own
    emitted, committed = 1, []  # the prefill emitted the first token
    for width in widths:
        matches = 0
        if width > 1:
            start = len(prompt) + emitted - 1  # the block's first position: the last token's
            block_ids = torch.full((1, block), draft.config.mask_token_id)
            block_ids[0, 0] = greedy[emitted - 1]
            positions = torch.arange(start, start + block).view(1, -1)
            context = torch.arange(start).view(1, -1)
            cache = DraftContextCache(draft.config.num_hidden_layers)
            logits, drafts = propose(target, draft, block_ids, positions, features[:, :start], context, cache)
            drafts = (logits.argmax(-1) if drafts is None else drafts)[0].tolist()
            while matches < width - 1 and drafts[matches] == greedy[emitted + matches]:
                matches += 1
        committed.append(matches + 1)
        emitted += matches + 1
    return committed
