"""Sampled verification of point proposals (argmax drafts) at production sizes.

With q one-hot at each draft d_i, rejection sampling (accept.rejection_accept) needs only
  p_i(d_i)  at every draft position: accept while u_i < p_i(d_i), and
  p_a       in full at ONE position a per request: the first rejection, where the token is drawn
            from normalise(max(p_a - onehot(d_a), 0)) = p_a without d_a, renormalised, or the
            bonus position B-1 after a fully accepted block, drawn from p_a itself.
So the [bs, B, V] probabilities of the dense path are never built: target_law.row_laws gives each
row's kept set and normaliser in bounded chunks, the drafts' p is a gather, and only [bs, V] rows
(one per request) are materialised for the final draw. Same law as the dense path, exactly.

No host reads of device data: the overlap worker calls this inside a step.
"""

from __future__ import annotations

import torch

from .accept import Acceptance, accepted_prefix_length
from .block_verify import accepted_block_length, final_law, prefix_weights, residual_mass
from .target_law import RowLaw, plan_for, row_laws


def sampled_accept(
    drafts: torch.Tensor,
    logits: torch.Tensor,
    sampling_info,
    block_size: int,
    reqs=None,
    generator: torch.Generator | None = None,
    proposal=None,
    block_verification: bool = False,
    draft_counts: torch.Tensor | None = None,
) -> Acceptance:
    """Speculative sampling against SGLang's per-request sampling law, for argmax drafts, or for
    drafts sampled from a law q (`proposal`: sampled_drafts.DraftProposal), token by token or, with
    `block_verification` and a proposal, as one block (sampling/block_verify.py).

    drafts: [bs, B-1]; logits: [bs * B, V] verify logits (read, not modified: the request outputs
    read them after); sampling_info: SGLang's SamplingBatchInfo (greedy rows carry top_k = 1);
    reqs: the batch's requests, whose host-side parameters bound the top-k window;
    draft_counts: [bs] each request's own number of drafts to judge (per-request verify lengths,
    step/ragged.py): a request that keeps them all draws its bonus from p at its own last position.
    """
    if proposal is not None and proposal.q_draft.shape[1] == 0:
        proposal = None  # no draft to judge (a width-1 step that drafted): the token comes from p
    law = row_laws(logits, sampling_info, block_size, plan_for(sampling_info, logits.shape[-1], reqs))
    p_draft = draft_probs(law, logits, drafts)
    bs, n_draft = drafts.shape
    uniform = torch.rand((bs, n_draft), generator=generator, device=logits.device, dtype=torch.float32)
    if proposal is None:
        accepted = within(accepted_prefix_length(uniform < p_draft), draft_counts)
        final = final_probs(law, logits, drafts, accepted, p_draft, draft_counts)
    elif block_verification:  # each request's block ends at its own count
        proposal = proposal.every_row()  # q at every position: one LM-head product a verify
        weights = prefix_weights(p_draft, proposal.q_draft)
        masses = residual_masses(law, logits, proposal, weights)
        accepted = accepted_block_length(weights, masses, uniform, draft_counts)
        weight = weights.gather(1, accepted.unsqueeze(1))
        final = sampled_final_probs(law, logits, proposal, accepted, weight, draft_counts)
    else:  # accept with min(1, p / q): u q < p
        accepted = within(accepted_prefix_length(uniform * proposal.q_draft < p_draft), draft_counts)
        final = sampled_final_probs(law, logits, proposal, accepted, draft_counts=draft_counts)
    extra = torch.multinomial(final, 1, generator=generator)
    tokens = torch.cat([drafts, drafts.new_zeros(bs, 1)], dim=1)
    tokens.scatter_(1, accepted.unsqueeze(1), extra)
    return Acceptance(accepted + 1, tokens)


def within(accepted: torch.Tensor, draft_counts: torch.Tensor | None) -> torch.Tensor:
    """The accepted drafts, at most each request's own count."""
    return accepted if draft_counts is None else torch.minimum(accepted, draft_counts)


def draft_probs(law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """[bs, B-1]: p_i(d_i), the target's probability of each draft at its position."""
    bs, n_draft = drafts.shape
    rows = logits.view(bs, n_draft + 1, -1)[:, :-1]
    at = torch.arange(bs * (n_draft + 1), device=logits.device).view(bs, -1)[:, :-1]
    scaled = rows.gather(-1, drafts.unsqueeze(-1)).squeeze(-1).float() / law.temperature[at]
    return law.log_prob(scaled.flatten().unsqueeze(-1), at.flatten()).exp().view(bs, n_draft)


def final_probs(
    law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor, p_draft: torch.Tensor,
    draft_counts: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """[bs, V]: the law of the one token the target adds at position `accepted` of each request."""
    bs, n_draft = drafts.shape
    row = torch.arange(bs, device=logits.device) * (n_draft + 1) + accepted  # [bs] flat row ids
    scaled = logits.index_select(0, row).float() / law.temperature[row].unsqueeze(-1)
    log_p = law.log_prob(scaled, row)
    del scaled
    # A rejected draft leaves the kept set; if it was all of it, p(d) = 1 and it was not rejected,
    # so the guard only keeps rounding from emptying a row.
    padded = torch.cat([drafts, drafts.new_zeros(bs, 1)], dim=1)
    d_at = padded.gather(1, accepted.unsqueeze(1))
    p_at = torch.cat([p_draft, p_draft.new_ones(bs, 1)], dim=1).gather(1, accepted.unsqueeze(1))
    last = n_draft if draft_counts is None else draft_counts.unsqueeze(1)  # the bonus position
    drop = (accepted.unsqueeze(1) < last) & (p_at < 1.0)
    log_p.scatter_(1, d_at, torch.where(drop, float("-inf"), log_p.gather(1, d_at)))
    return torch.softmax(log_p, dim=-1)


def target_rows(law: RowLaw, logits: torch.Tensor, position: torch.Tensor, n_draft: int) -> torch.Tensor:
    """[bs, V]: the target's law p at one block position per request (`position` [bs])."""
    rows = position + (n_draft + 1) * torch.arange(position.shape[0], device=logits.device)  # flat ids
    scaled = logits.index_select(0, rows).float() / law.temperature[rows].unsqueeze(-1)
    return law.log_prob(scaled, rows).exp()


def residual_masses(law: RowLaw, logits: torch.Tensor, proposal, weights: torch.Tensor) -> torch.Tensor:
    """[bs, n]: r_i = sum_x max(w_i p_i(x) - q_i(x), 0) at block positions 1 .. n - 1 (column 0 is
    unused), one [bs, V] row pair at a time (q's rows sliced from `proposal.every_row()`'s logits)."""
    bs, n_draft = proposal.q_draft.shape
    masses = torch.zeros_like(proposal.q_draft)
    vocab = logits.shape[-1]
    for i in range(1, n_draft):
        position = torch.full((bs,), i, dtype=torch.int64, device=logits.device)
        p = target_rows(law, logits, position, n_draft)
        masses[:, i] = residual_mass(weights[:, i], p, proposal.rows(position, vocab))
    return masses


def sampled_final_probs(
    law: RowLaw, logits: torch.Tensor, proposal, accepted: torch.Tensor, weight: torch.Tensor | None = None,
    draft_counts: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """[bs, V]: as final_probs, for sampled drafts: normalise(max(w p_a - q_a, 0)) after a
    rejection at a (w = 1 token by token; block verification's prefix weight `weight` [bs, 1]),
    p itself at the bonus position."""
    n_draft = proposal.q_draft.shape[1]
    p_at = target_rows(law, logits, accepted, n_draft)
    q_at = proposal.rows(accepted.clamp_max(n_draft - 1), p_at.shape[-1])
    weight = torch.ones_like(accepted, dtype=p_at.dtype) if weight is None else weight.view(-1)
    if draft_counts is not None:  # a request that kept all its own drafts: its bonus, from p
        q_at = q_at * (accepted < draft_counts).unsqueeze(1)
    return final_law(weight, p_at, q_at, accepted >= n_draft)
