"""Frequency, presence and repetition penalties and `min_new_tokens`, exact at every block position.

A no-spec server feeds each generated token to SGLang's penalizers before it samples the next one,
so token t is penalised by the t tokens generated before it. SGLang's speculative DFLASH path
feeds them nothing (its draft state's `prepare_for_decode` skips `cumulate_penalty_output_tokens`,
and a forward sees a copy of the sampling info without the penalizers), so penalties would stay at
their prefill values. Here the worker keeps the count itself:

    PenaltyLedger   per request slot (req_pool_index), on the device: how often each token was
                    generated since the request's last prefill, and how many tokens that is;
                    reset by prefill, advanced by every commit, never read on the host. A
                    request that reaches verify without a prefill here (a PD decode server's:
                    the prefill server sampled its first token) starts from its host output_ids
    block position k of `[b, d_1 .. d_{B-1}]` predicts the token after d_k; when the target gets
                    there, the generated tokens are the committed ones (b included) plus
                    d_1 .. d_k, so that is what position k's penalties count
    tree node k     the drafts on its root path take the place of d_1 .. d_k

The order is that of SGLang's overlap loop and speculative paths
(`SamplingBatchInfo._apply_pre_grammar_logits_transforms`, `PenalizerOrchestrator.apply(repeat=)`):
the additive penalties (frequency, presence, min_new_tokens), then repetition's scaling. (Its
synchronous no-spec loop applies the penalizers in the iteration order of a set of classes, so
there repetition combined with an additive penalty has no defined order; docs/features.md.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)


def _scale(values: torch.Tensor, factors: torch.Tensor) -> None:
    """Repetition's rule (SGLang's `apply_scaling_penalties`), in place. Eager: SGLang's is a
    torch.compile'd function, which the host-sync check's TorchFunctionMode silently changes."""
    values.copy_(torch.where(values < 0, values * factors, values / factors))


@dataclass(frozen=True)
class PenaltyParams:
    """The batch's penalty settings, per row; None where no request of the batch uses one."""

    frequency: torch.Tensor | None  # [bs] float32
    presence: torch.Tensor | None  # [bs] float32
    repetition: torch.Tensor | None  # [bs] float32
    min_new_tokens: torch.Tensor | None  # [bs] int64
    stop_ids: torch.Tensor | None  # [bs, S] the tokens min_new_tokens bans (padded with -1)

    @classmethod
    def of(cls, reqs, device) -> PenaltyParams | None:
        """From the requests' sampling params (host data only); None if nothing is penalised."""
        params = [req.sampling_params for req in reqs]
        frequency = [p.frequency_penalty for p in params]
        presence = [p.presence_penalty for p in params]
        repetition = [p.repetition_penalty for p in params]
        min_new = [p.min_new_tokens for p in params]
        if not (any(frequency) or any(presence) or any(r != 1.0 for r in repetition) or any(min_new)):
            return None

        def column(values, dtype):
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        stop_ids = None
        if any(min_new):
            # A request that already has its minimum (the host may lag one step) needs no ban.
            rows = [
                stop_token_ids(req) if req.sampling_params.min_new_tokens > len(req.output_ids) else []
                for req in reqs
            ]
            width = max(1, max(len(row) for row in rows))
            stop_ids = column([row + [-1] * (width - len(row)) for row in rows], torch.int64)
        return cls(
            frequency=column(frequency, torch.float32) if any(frequency) else None,
            presence=column(presence, torch.float32) if any(presence) else None,
            repetition=column(repetition, torch.float32) if any(r != 1.0 for r in repetition) else None,
            min_new_tokens=column(min_new, torch.int64) if any(min_new) else None,
            stop_ids=stop_ids,
        )


def stop_token_ids(req) -> list[int]:
    """The tokens SGLang's min_new_tokens penalizer bans (`BatchedMinNewTokensPenalizer`)."""
    tokenizer = req.tokenizer
    eos = getattr(tokenizer, "eos_token_id", None)
    ids = (
        set(req.sampling_params.stop_token_ids or ())
        | set(req.eos_token_ids or ())
        | set(getattr(tokenizer, "additional_stop_token_ids", None) or ())
        | {eos}
    )
    return sorted(i for i in ids if i is not None)


class PenaltyLedger:
    """What each request slot generated since its last prefill, on the device."""

    def __init__(self, slots: int, vocab_size: int, device):
        self.counts = torch.zeros((slots, vocab_size), dtype=torch.float32, device=device)
        self.lengths = torch.zeros((slots,), dtype=torch.int64, device=device)
        self.owners: dict[int, str] = {}  # slot -> the rid its counts belong to (host data)

    @classmethod
    def allocate(cls, slots: int, vocab_size: int, device) -> PenaltyLedger:
        logger.info(
            "dflash_sglang: penalties requested: counting generated tokens per request slot "
            "(%d slots x %d tokens, %.1f MB)",
            slots,
            vocab_size,
            slots * vocab_size * 4 / 2**20,
        )
        return cls(slots, vocab_size, device)

    def start(self, slots: torch.Tensor, first_tokens: torch.Tensor, reqs) -> None:
        """Prefill: each request's count restarts from its first generated token."""
        self.counts[slots] = 0
        self.counts[slots, first_tokens] = 1
        self.lengths[slots] = 1
        self.owners.update((req.kv.req_pool_idx, req.rid) for req in reqs)

    def catch_up(self, reqs) -> None:
        """Before a verify: requests whose counts were not started here (their prefill ran on a
        PD prefill server) start from what they generated so far, read from host data."""
        fresh = [req for req in reqs if self.owners.get(req.kv.req_pool_idx) != req.rid]
        if not fresh:
            return
        device = self.counts.device
        slots = torch.tensor([req.kv.req_pool_idx for req in fresh]).to(device, non_blocking=True)
        rows = torch.tensor([i for i, req in enumerate(fresh) for _ in req.output_ids], dtype=torch.int64)
        tokens = torch.tensor([t for req in fresh for t in req.output_ids], dtype=torch.int64)
        counts = torch.zeros((len(fresh), self.counts.shape[1]), dtype=self.counts.dtype)
        counts.index_put_((rows, tokens), torch.ones(len(tokens), dtype=counts.dtype), accumulate=True)
        self.counts[slots] = counts.to(device, non_blocking=True)
        self.lengths[slots] = torch.tensor([len(req.output_ids) for req in fresh]).to(
            device, non_blocking=True
        )
        self.owners.update((req.kv.req_pool_idx, req.rid) for req in fresh)

    def commit(self, slots: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> None:
        """A step emitted `tokens[i, :lengths[i]]` for request slot `slots[i]`."""
        bs, width = tokens.shape
        emitted = torch.arange(width, device=tokens.device) < lengths.unsqueeze(1)
        rows = slots.unsqueeze(1).expand(bs, width)
        self.counts.index_put_((rows, tokens), emitted.to(self.counts.dtype), accumulate=True)
        self.lengths[slots] += lengths.to(self.lengths.dtype)

    def apply(self, logits: torch.Tensor, slots: torch.Tensor, block: torch.Tensor, params, tree=None):
        """Penalise [bs, B, V] verify logits in place; `block` is [bs, B] = [b, d_1 .. d_{B-1}],
        or a tree's nodes (`tree`, a tree_batch.BatchTree)."""
        counts, lengths = self.counts[slots], self.lengths[slots]
        if tree is None:
            apply_block_penalties(logits, block, counts, lengths, params)
        else:
            apply_tree_penalties(logits, tree, counts, lengths, params)


def block_pairs(size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(j, k) for every draft d_j (1 <= j < size) and every block position k >= j it precedes."""
    j, k = torch.triu_indices(size, size, device=device)
    keep = j >= 1
    return j[keep], k[keep]


def apply_block_penalties(
    logits: torch.Tensor, block: torch.Tensor, counts: torch.Tensor, lengths: torch.Tensor, params
) -> None:
    """logits [bs, B, V]; counts [bs, V] and lengths [bs]: what was generated before the block."""
    bs, size, _ = logits.shape
    generated = counts > 0
    j, k = block_pairs(size, logits.device)
    rows = torch.arange(bs, device=logits.device).unsqueeze(1).expand(bs, j.numel())
    positions = k.unsqueeze(0).expand(bs, -1)
    drafts = block[:, j]  # [bs, P]: d_j, once per position k >= j
    new = ~generated.gather(1, drafts)  # d_j was not generated before the block
    earlier = block[:, 1:].unsqueeze(2) == block[:, 1:].unsqueeze(1)  # [bs, B-1, B-1]: d_i == d_j
    first = ~(earlier & torch.ones_like(earlier[0]).tril(-1)).any(-1)  # no d_i == d_j with i < j
    first = first[:, j - 1]

    # Additive: frequency (per occurrence), presence (once per token), min_new_tokens' ban.
    if params.frequency is not None or params.presence is not None:
        additive = torch.zeros_like(counts)
        in_block = torch.zeros_like(drafts, dtype=logits.dtype)
        if params.frequency is not None:
            additive += params.frequency.unsqueeze(1) * counts
            in_block += params.frequency.unsqueeze(1)
        if params.presence is not None:
            additive += params.presence.unsqueeze(1) * generated
            in_block += params.presence.unsqueeze(1) * (first & new)
        logits.sub_(additive.unsqueeze(1))
        logits.index_put_((rows, positions, drafts), -in_block, accumulate=True)
    if params.min_new_tokens is not None:
        ban_min_new_stop_tokens(logits, lengths, params.min_new_tokens, params.stop_ids)

    # Scaling: repetition, once per token: committed tokens everywhere, d_j from position j on.
    if params.repetition is not None:
        factors = params.repetition.unsqueeze(1)
        _scale(logits, torch.where(generated, factors, 1.0).unsqueeze(1))
        values = logits[rows, positions, drafts]  # a token repeated in the block: same entries
        scaled = values.clone()
        _scale(scaled, torch.where(new, factors, 1.0))
        logits.index_put_((rows, positions, drafts), scaled)


def apply_tree_penalties(
    logits: torch.Tensor, tree, counts: torch.Tensor, lengths: torch.Tensor, params
) -> None:
    """logits [bs, N, V] at a tree's nodes. Node k's history is what was generated before the step
    plus the drafts on its root path, itself included (the root, the verified token, is counted
    already), and it emits generated token number lengths + depth[k]. Counted densely, [bs, N, V]
    like the logits: a node's path is data, not a fixed triangle as in a chain."""
    bs, n, vocab = logits.shape
    on_path = tree.ancestor_mask().clone()  # [bs, N, N]: row k marks k's root path
    on_path[:, :, 0] = False
    history = counts.unsqueeze(1).expand(bs, n, vocab).clone()
    history.scatter_add_(2, tree.tokens.unsqueeze(1).expand(bs, n, n), on_path.to(history.dtype))
    generated = history > 0
    if params.frequency is not None:
        logits.sub_(params.frequency.view(bs, 1, 1) * history)
    if params.presence is not None:
        logits.sub_(params.presence.view(bs, 1, 1) * generated)
    if params.min_new_tokens is not None:
        ban_min_new_stop_tokens(logits, lengths, params.min_new_tokens, params.stop_ids, tree.depths)
    if params.repetition is not None:
        _scale(logits, torch.where(generated, params.repetition.view(bs, 1, 1), 1.0))


def ban_min_new_stop_tokens(logits, lengths, min_new_tokens, stop_ids, offsets=None) -> None:
    """Position k of a block emits generated token number lengths + k (a tree node: + its depth,
    `offsets`): ban stops while below min."""
    bs, size, _ = logits.shape
    if offsets is None:
        offsets = torch.arange(size, device=logits.device)
    banned = (lengths.unsqueeze(1) + offsets) < min_new_tokens.unsqueeze(1)
    width = stop_ids.shape[1]
    rows = torch.arange(bs, device=logits.device).view(bs, 1, 1).expand(bs, size, width)
    positions = torch.arange(size, device=logits.device).view(1, size, 1).expand(bs, size, width)
    tokens = stop_ids.clamp_min(0).unsqueeze(1).expand(bs, size, width)
    ban = banned.unsqueeze(2) & (stop_ids >= 0).unsqueeze(1)
    penalty = torch.where(ban, float("-inf"), 0.0).to(logits.dtype)
    logits.index_put_((rows, positions, tokens), penalty, accumulate=True)
