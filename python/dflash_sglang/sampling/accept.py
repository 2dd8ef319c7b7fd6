"""Acceptance rules for one verified block, batched, pure tensor code.

A block is `[verified token, d_1 .. d_{B-1}]`. The target's verify pass gives one prediction per
block position: position i predicts the token after `block[i]`. A step commits the accepted
drafts plus one token of the target's own (the correction, or the bonus after a fully accepted
block), so it always emits between 1 and B tokens.

Nothing here reads a tensor back to the host: the overlap worker calls these inside a step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Acceptance(NamedTuple):
    """`tokens[i, :lengths[i]]` are the tokens request i emits this step (1 <= length <= B)."""

    lengths: torch.Tensor  # [bs] int64
    tokens: torch.Tensor  # [bs, B] int64; entries past `lengths` are padding


def accepted_prefix_length(ok: torch.Tensor) -> torch.Tensor:
    """Number of leading True entries per row of a [bs, n] boolean tensor."""
    return ok.to(torch.int64).cumprod(dim=1).sum(dim=1)


def greedy_accept(draft_tokens: torch.Tensor, target_tokens: torch.Tensor) -> Acceptance:
    """Temperature 0: accept while each draft equals the target's argmax at the position before.

    draft_tokens: [bs, B-1]; target_tokens: [bs, B], the target's argmax per block position.
    Accepted drafts equal the target's own choices, so the emitted tokens are simply the target's
    first `accepted + 1` predictions (the last one is the correction or bonus).
    """
    accepted = accepted_prefix_length(draft_tokens == target_tokens[:, :-1])
    return Acceptance(accepted + 1, target_tokens)


def rejection_accept(
    draft_tokens: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """Temperature > 0: speculative sampling, lossless for any proposal.

    draft_tokens: [bs, B-1] proposals; target_probs: [bs, B, V] the target's sampling
    distributions p per block position; draft_probs: [bs, B-1, V] the distributions q the drafts
    were sampled from, or None when the drafts are point proposals (argmax drafts, q one-hot).

    Draft x at position i is accepted with probability min(1, p(x)/q(x)); at the first rejection
    the token is resampled from normalise(max(p - q, 0)); after a fully accepted block the bonus
    token is sampled from p at the last position. Every emitted token is then distributed exactly
    as the target's own sample given the emitted prefix.
    """
    bs, n_draft = draft_tokens.shape
    vocab = target_probs.shape[-1]
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft_tokens, vocab).to(target_probs.dtype)
    index = draft_tokens.unsqueeze(-1)
    p_draft = target_probs[:, :-1].gather(-1, index).squeeze(-1)
    q_draft = draft_probs.gather(-1, index).squeeze(-1)
    uniform = torch.rand(
        (bs, n_draft), generator=generator, device=target_probs.device, dtype=target_probs.dtype
    )
    accepted = accepted_prefix_length(uniform * q_draft < p_draft)

    # The distribution of the one token the target adds at position `accepted`.
    q_padded = torch.cat([draft_probs, draft_probs.new_zeros(bs, 1, vocab)], dim=1)
    at = accepted.view(bs, 1, 1).expand(bs, 1, vocab)
    p_at = target_probs.gather(1, at).squeeze(1)
    residual = (p_at - q_padded.gather(1, at).squeeze(1)).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_at)
    extra = torch.multinomial(residual, 1, generator=generator)

    tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(bs, 1)], dim=1)
    tokens.scatter_(1, accepted.unsqueeze(1), extra)
    return Acceptance(accepted + 1, tokens)


def sampling_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The distribution a sampler at `temperature` draws from (float32 for stable sums)."""
    return torch.softmax(logits.float() / temperature, dim=-1)
