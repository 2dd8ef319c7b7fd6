"""Sampled verification of point proposals (argmax drafts) at production sizes.

With q one-hot at each draft d_i, rejection sampling (accept.rejection_accept) needs only
  p_i(d_i)  at every draft position: accept while u_i < p_i(d_i), and
  p_a       in full at ONE position a per request: the first rejection, where the token is drawn
            from normalise(max(p_a - onehot(d_a), 0)) = p_a without d_a, renormalised, or the
            bonus position B-1 after a fully accepted block, drawn from p_a itself.
So the [bs, B, V] probabilities of the dense path are never built: target_law.row_laws gives each
row's kept set and normaliser in bounded chunks, the drafts' p is a gather, and the final draw
(one row per request) and block verification's residual masses run over chunks of requests, so
that beside the logits (the target's, and the drafter's for q) at most target_law.EXTRA_BYTES are
alive (tests/test_bounded_memory.py). Same law as the dense path, exactly.

On CUDA the acceptance and the final draw run accept_triton.py's kernels (`kernel_accept`: the
same coins, then one uniform a request drawn by the inverse CDF of the same final law, where the
CPU's torch.multinomial draws other numbers of it); the CPU keeps the torch path below, unchanged.

No host reads of device data: the overlap worker calls this inside a step.
"""

from __future__ import annotations

import torch

from ..environment import TRITON_ROW_LAW
from .accept import Acceptance, accepted_prefix_length
from .block_verify import accepted_block_length, final_law, prefix_weights
from .sampled_drafts import DraftProposal
from .target_law import RowLaw, chunks, plan_for, row_laws, rows_within, scaled_rows

# Devices whose verify takes accept_triton's kernels: where the row-law kernel runs, under the same
# switch; CPU never (the interpreter test sets ("cpu",) to drive this branch under TRITON_INTERPRET).
TRITON_ACCEPT_DEVICES = ("cuda",) if TRITON_ROW_LAW.value() else ()


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
    if takes_kernels(logits, drafts, proposal):
        return kernel_accept(law, logits, drafts, proposal, block_verification, draft_counts, generator)
    p_draft = draft_probs(law, logits, drafts)
    bs, n_draft = drafts.shape
    uniform = torch.rand((bs, n_draft), generator=generator, device=logits.device, dtype=torch.float32)
    weight = None
    if proposal is None:
        accepted = within(accepted_prefix_length(uniform < p_draft), draft_counts)
    elif block_verification:  # each request's block ends at its own count
        proposal = proposal.every_row()  # q at every position: one LM-head product a verify
        weights = prefix_weights(p_draft, proposal.q_draft)
        masses = residual_masses(law, logits, proposal, weights)
        accepted = accepted_block_length(weights, masses, uniform, draft_counts)
        weight = weights.gather(1, accepted.unsqueeze(1))
    else:  # accept with min(1, p / q): u q < p
        accepted = within(accepted_prefix_length(uniform * proposal.q_draft < p_draft), draft_counts)
    extra = final_draws(law, logits, drafts, accepted, p_draft, proposal, weight, draft_counts, generator)
    tokens = torch.cat([drafts, drafts.new_zeros(bs, 1)], dim=1)
    tokens.scatter_(1, accepted.unsqueeze(1), extra.unsqueeze(1))
    return Acceptance(accepted + 1, tokens)


def takes_kernels(logits: torch.Tensor, drafts: torch.Tensor, proposal) -> bool:
    """Host shapes only: the kernels' device, drafts to judge, rows the kernels can index, and a q
    they can read (DFlash2's candidate walk has no logits: its verify stays torch)."""
    return (
        logits.device.type in TRITON_ACCEPT_DEVICES
        and drafts.numel() > 0
        and logits.stride(-1) == 1
        and (proposal is None or isinstance(proposal, DraftProposal))
    )


def kernel_accept(
    law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor, proposal, block_verification: bool,
    draft_counts: torch.Tensor | None, generator=None,
) -> Acceptance:  # fmt: skip
    """sampled_accept on accept_triton's kernels. The coins are the torch path's ([bs, B-1] from
    the same generator first), then one uniform a request for the final draw. Token by token the
    `accept` kernel decides; block verification keeps the torch prefix weights and masses. The
    `draw` kernel reads p's row and, for sampled drafts, the drafter's raw logits at the rejected
    row ([bs, V]: one LM-head product, or `every_row`'s slice): no [chunk, V] float temporaries."""
    from . import accept_triton  # Triton loads only where its kernels run

    bs, n_draft = drafts.shape
    uniform = torch.rand((bs, n_draft), generator=generator, device=logits.device, dtype=torch.float32)
    final_u = torch.rand((bs,), generator=generator, device=logits.device, dtype=torch.float32)
    weight = None
    if proposal is None:
        accepted = accept_triton.accept(logits, law, drafts, uniform, None, draft_counts)
    elif block_verification:
        proposal = proposal.every_row()
        weights = prefix_weights(draft_probs(law, logits, drafts), proposal.q_draft)
        masses = residual_masses(law, logits, proposal, weights)
        accepted = accepted_block_length(weights, masses, uniform, draft_counts)
        weight = weights.gather(1, accepted.unsqueeze(1)).view(-1)
    else:
        accepted = accept_triton.accept(logits, law, drafts, uniform, proposal.q_draft, draft_counts)
    q = None if proposal is None else proposal.logits_at(accepted.clamp_max(n_draft - 1))
    extra = accept_triton.draw(
        logits, law, drafts, accepted, final_u, q=q, weight=weight, counts=draft_counts
    )
    tokens = torch.cat([drafts, drafts.new_zeros(bs, 1)], dim=1)
    tokens.scatter_(1, accepted.unsqueeze(1), extra.unsqueeze(1))
    return Acceptance(accepted + 1, tokens)


def within(accepted: torch.Tensor, draft_counts: torch.Tensor | None) -> torch.Tensor:
    """The accepted drafts, at most each request's own count."""
    return accepted if draft_counts is None else torch.minimum(accepted, draft_counts)


def request_rows(part: slice, block: int) -> slice:
    """The verify rows of the requests `part` (each request's block of rows is contiguous)."""
    return slice(part.start * block, part.stop * block)


def draft_probs(law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    """[bs, B-1]: p_i(d_i), the target's probability of each draft at its position."""
    bs, n_draft = drafts.shape
    rows = logits.view(bs, n_draft + 1, -1)[:, :-1]
    at = torch.arange(bs * (n_draft + 1), device=logits.device).view(bs, -1)[:, :-1]
    scaled = rows.gather(-1, drafts.unsqueeze(-1)).squeeze(-1).float() / law.temperature[at]
    return law.log_prob(scaled.flatten().unsqueeze(-1), at.flatten()).exp().view(bs, n_draft)


def final_draws(
    law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor, p_draft: torch.Tensor,
    proposal, weight: torch.Tensor | None, draft_counts: torch.Tensor | None, generator=None,
) -> torch.Tensor:  # fmt: skip
    """[bs]: the token the target adds at each request's position `accepted`, drawn over chunks of
    requests (one multinomial each, so the draws equal one call's on CPU under the same generator).
    Sampled drafts take q's rows at the rejected positions first, all at once ([bs, V]: one LM-head
    product when q is not kept), and the chunks share what that leaves of the budget."""
    bs, n_draft = drafts.shape
    vocab = logits.shape[-1]
    q_at = None if proposal is None else rejected_q(proposal, accepted, vocab, draft_counts)
    held = 0 if q_at is None else q_at.numel() * q_at.element_size()
    extra = torch.empty(bs, dtype=torch.int64, device=logits.device)
    for part in chunks(bs, rows_within(vocab, held)):
        rows = request_rows(part, n_draft + 1)
        if q_at is None:
            counts = None if draft_counts is None else draft_counts[part]
            final = final_probs(
                law.part(rows), logits[rows], drafts[part], accepted[part], p_draft[part], counts
            )
        else:
            at_weight = None if weight is None else weight[part]
            final = sampled_final_probs(
                law.part(rows), logits[rows], q_at[part], accepted[part], n_draft, at_weight
            )
        extra[part] = torch.multinomial(final, 1, generator=generator).view(-1)
        del final
    return extra


def final_probs(
    law: RowLaw, logits: torch.Tensor, drafts: torch.Tensor, accepted: torch.Tensor, p_draft: torch.Tensor,
    draft_counts: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """[bs, V]: the law of the one token the target adds at position `accepted` of each request."""
    bs, n_draft = drafts.shape
    row = torch.arange(bs, device=logits.device) * (n_draft + 1) + accepted  # [bs] flat row ids
    log_p = law.log_prob_(scaled_rows(logits, row, law.temperature), row)
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
    return law.prob_(scaled_rows(logits, rows, law.temperature), rows)


def residual_masses(law: RowLaw, logits: torch.Tensor, proposal, weights: torch.Tensor) -> torch.Tensor:
    """[bs, n]: r_i = sum_x max(w_i p_i(x) - q_i(x), 0) at block positions 1 .. n - 1 (column 0 is
    unused), one [chunk, V] row pair at a time over chunks of requests (q's rows sliced from
    `proposal.every_row()`'s logits), summed in p's own memory."""
    bs, n_draft = proposal.q_draft.shape
    masses = torch.zeros_like(proposal.q_draft)
    vocab = logits.shape[-1]
    for part in chunks(bs, rows_within(vocab)):
        rows = request_rows(part, n_draft + 1)
        part_law, part_logits, part_q = law.part(rows), logits[rows], proposal.requests(part)
        for i in range(1, n_draft):
            position = torch.full((part.stop - part.start,), i, dtype=torch.int64, device=logits.device)
            p = target_rows(part_law, part_logits, position, n_draft)
            q = part_q.rows(position, vocab)
            masses[part, i] = p.mul_(weights[part, i].unsqueeze(-1)).sub_(q).clamp_min_(0).sum(-1)
            del p, q
    return masses


def rejected_q(
    proposal, accepted: torch.Tensor, vocab: int, draft_counts: torch.Tensor | None
) -> torch.Tensor:
    """[bs, V]: q at each request's rejected position (any row at the bonus: final_law ignores it);
    zero for a request that kept all its own drafts (per-request lengths): its bonus comes from p."""
    n_draft = proposal.q_draft.shape[1]
    q_at = proposal.rows(accepted.clamp_max(n_draft - 1), vocab)
    if draft_counts is not None:
        q_at.mul_((accepted < draft_counts).unsqueeze(1))
    return q_at


def sampled_final_probs(
    law: RowLaw, logits: torch.Tensor, q_at: torch.Tensor, accepted: torch.Tensor, n_draft: int,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """[bs, V]: as final_probs, for sampled drafts (q_at from `rejected_q`): normalise(max(w p_a -
    q_a, 0)) after a rejection at a (w = 1 token by token; block verification's prefix weight
    `weight` [bs, 1]), p itself at the bonus position."""
    p_at = target_rows(law, logits, accepted, n_draft)
    weight = torch.ones_like(accepted, dtype=p_at.dtype) if weight is None else weight.view(-1)
    return final_law(weight, p_at, q_at, accepted >= n_draft)
