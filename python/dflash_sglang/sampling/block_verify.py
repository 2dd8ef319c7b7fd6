"""Block verification (Sun et al. 2024, arXiv 2403.10444, Algorithm 2) for sampled drafts.

Token-wise verification accepts draft i with probability min(1, p_i(d_i) / q_i(d_i)) and stops
at the first rejection. Block verification judges the whole block at once: it keeps the prefix
weight
    w_0 = 1,  w_i = min(w_{i-1} p_i(d_i) / q_i(d_i), 1),
the residual mass after i drafts r_i = sum_x max(w_i p_{i+1}(x) - q_{i+1}(x), 0), and accepts the
longest prefix i whose coin falls below
    h_i = r_i / (r_i + 1 - w_i)  (i < n),   h_n = w_n,
then draws the target's own token from normalise(max(w_i p_{i+1} - q_{i+1}, 0)) (from p itself
after the whole block). Lossless, and never fewer accepted tokens in expectation than token-wise.
For point drafts (q one-hot) the two accept every prefix with the target's own probability of it,
so the worker verifies those token by token (as SGLang's built-in says at startup).

SGLang's own is a Triton kernel (sglang.kernels.ops.speculative.reject_sampling, BLOCK_VERIFICATION)
that needs an accelerator; this is its law in torch, checked token for token against that kernel
under Triton's interpreter (tests/test_block_verify.py). `--speculative-use-block-verification`
turns it on (SGLang refuses the flag off CUDA; cpu/platform/checks.py lets it through for DFLASH on CPU).

Nothing here reads device data on the host: the overlap worker calls it inside a step.
"""

from __future__ import annotations

import torch

from .accept import Acceptance


def prefix_weights(p_draft: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """[bs, n + 1]: w_0 = 1 and w_i = min(w_{i-1} p_i(d_i) / q_i(d_i), 1); 0 where q(d) is no
    probability (a draft its proposal could not have drawn)."""
    weights = [torch.ones_like(p_draft[:, 0])]
    for i in range(p_draft.shape[1]):
        q = q_draft[:, i]
        ok = (q > 0) & (q <= 1)
        ratio = weights[-1] * p_draft[:, i] / torch.where(ok, q, torch.ones_like(q))
        weights.append(torch.where(ok, ratio.clamp_max(1.0), torch.zeros_like(q)))
    return torch.stack(weights, dim=1)


def residual_mass(weight: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """[bs]: sum_x max(w p(x) - q(x), 0) for rows p, q [bs, V] and weights w [bs]."""
    return (weight.unsqueeze(-1) * p - q).clamp_min(0).sum(-1)


def accepted_block_length(
    weights: torch.Tensor, masses: torch.Tensor, uniform: torch.Tensor, counts: torch.Tensor | None = None
) -> torch.Tensor:
    """[bs]: the longest prefix i in 1..n whose coin u_i (uniform[:, i - 1]) is below h_i, else 0.

    weights: [bs, n + 1] from prefix_weights; masses: [bs, n], masses[:, i] = r_i (column 0 unused);
    counts: [bs] each request's own block length n_i <= n (per-request verify lengths): its block
    ends there, h_{n_i} = w_{n_i}, and no prefix past it is judged (the rows hold no verify).
    """
    n = uniform.shape[1]
    w = weights[:, 1:]  # w_1 .. w_n
    r = torch.cat([masses[:, 1:], torch.zeros_like(masses[:, :1])], dim=1)  # r_1 .. r_{n-1}, pad
    h = torch.where(w >= 1.0, torch.ones_like(w), r / (r + 1.0 - w).clamp_min(1e-30))
    steps = torch.arange(1, n + 1, device=uniform.device)
    ends = n if counts is None else counts.unsqueeze(1)  # each request's last draft
    h = torch.where(steps == ends, w, h)  # the whole (own) block: accepted with its weight
    h = torch.where((w > 0) & (steps <= ends), h, torch.zeros_like(h))
    ok = uniform < h
    return torch.where(ok, steps, torch.zeros_like(steps)).amax(dim=1)


def final_law(
    weight: torch.Tensor, p_at: torch.Tensor, q_at: torch.Tensor, bonus: torch.Tensor
) -> torch.Tensor:
    """[bs, V]: normalise(max(w p - q, 0)) after a prefix short of the block, p after all of it.
    One [bs, V] tensor beside its inputs (the steps run in place; the inputs are not modified)."""
    residual = (weight.unsqueeze(-1) * p_at).sub_(q_at).clamp_min_(0)
    torch.where(bonus.unsqueeze(-1), p_at, residual, out=residual)
    mass = residual.sum(-1, keepdim=True)
    residual.div_(mass.clamp_min(1e-30))
    return torch.where(mass > 0, residual, p_at, out=residual)


def block_rejection_accept(
    draft_tokens: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """The dense reference: draft_tokens [bs, n] drawn from draft_probs [bs, n, V], judged against
    target_probs [bs, n + 1, V] (as accept.rejection_accept, for drafts with a full q)."""
    bs, n = draft_tokens.shape
    index = draft_tokens.unsqueeze(-1)
    p_draft = target_probs[:, :-1].gather(-1, index).squeeze(-1)
    q_draft = draft_probs.gather(-1, index).squeeze(-1)
    weights = prefix_weights(p_draft, q_draft)
    masses = torch.stack(
        [residual_mass(weights[:, i], target_probs[:, i], draft_probs[:, i]) for i in range(n)], dim=1
    )
    uniform = torch.rand((bs, n), generator=generator, device=target_probs.device, dtype=target_probs.dtype)
    accepted = accepted_block_length(weights, masses, uniform)
    at = accepted.view(bs, 1, 1).expand(bs, 1, target_probs.shape[-1])
    p_at = target_probs.gather(1, at).squeeze(1)
    q_padded = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)
    q_at = q_padded.gather(1, at).squeeze(1)
    w_at = weights.gather(1, accepted.unsqueeze(1)).squeeze(1)
    extra = torch.multinomial(final_law(w_at, p_at, q_at, accepted >= n), 1, generator=generator)
    tokens = torch.cat([draft_tokens, draft_tokens.new_zeros(bs, 1)], dim=1)
    tokens.scatter_(1, accepted.unsqueeze(1), extra)
    return Acceptance(accepted + 1, tokens)


def block_verification_for(requested: bool, sampled_drafts: bool) -> tuple[bool, str]:
    """Whether this server verifies sampled drafts as a block (SGLang's
    `--speculative-use-block-verification`), and the startup log's words."""
    if not requested:
        return False, ""
    if sampled_drafts:
        return True, "; verified as a block (--speculative-use-block-verification)"
    # As SGLang's built-in says: a point draft's prefix is accepted with its target probability
    # token by token already, so block verification would change nothing.
    return False, "; --speculative-use-block-verification has no effect on point drafts"
