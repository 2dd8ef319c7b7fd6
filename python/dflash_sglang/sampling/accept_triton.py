"""The token-wise sampled verify on CUDA as two Triton kernels: the acceptance, and the one draw.

Given each verify row's law from row_laws (its temperature, cut and log_norm: row_law_triton.py
on CUDA), p(x) = exp(s_x - log_norm) on s = logits / temperature >= cut, and 0 elsewhere:

  accept    one program a request: p_i(d_i) at each draft from one logit, accept while
            u_i q_i(d_i) < p_i(d_i) (point drafts: q = 1), at most the request's own count;
  draw      one program a request, two passes over its row a (the first rejection, or the bonus
            row): the mass of the law the token is drawn from, then the first token whose
            cumulative mass exceeds u times it (the inverse CDF). The law is sampled_verify's:
            point drafts  p_a without the rejected draft (p_a itself at the bonus);
            sampled       normalise(max(w p_a - q_a, 0)), p_a where that is empty or at the bonus,
                          with q_a from the drafter's logits at a ([bs, V], one LM-head product
                          after `accept`: which rows it needs is what `accept` decides).

Nothing grows with V but the logits read; no host sync. sampled_verify.sampled_accept runs them
on CUDA (TRITON_ACCEPT_DEVICES; the CPU keeps torch.multinomial, other numbers of the same law);
no GPU has timed them yet. tests/test_accept_triton.py runs them under Triton's interpreter
against the torch path's p(d), acceptance and final law with the same uniforms, and
tests/test_sampled_verify_triton.py runs sampled_accept end to end through them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024  # logits a pass reads per step


@triton.jit
def _accept_kernel(
    logits_ptr, stride, temperature_ptr, cut_ptr, log_norm_ptr, drafts_ptr, q_draft_ptr, uniform_ptr,
    counts_ptr, accepted_ptr, n_draft,
):  # fmt: skip
    req = tl.program_id(0).to(tl.int64)
    going = 1
    accepted = 0
    for i in range(0, n_draft):
        row = req * (n_draft + 1) + i
        draft = tl.load(drafts_ptr + req * n_draft + i)
        s = tl.math.div_rn(
            tl.load(logits_ptr + row * stride + draft).to(tl.float32), tl.load(temperature_ptr + row)
        )
        p = tl.where(s >= tl.load(cut_ptr + row), tl.exp(s - tl.load(log_norm_ptr + row)), 0.0)
        u = tl.load(uniform_ptr + req * n_draft + i)
        if q_draft_ptr is not None:
            u = u * tl.load(q_draft_ptr + req * n_draft + i)
        going = going & (u < p).to(tl.int32)
        accepted += going
    if counts_ptr is not None:
        accepted = tl.minimum(accepted, tl.load(counts_ptr + req))
    tl.store(accepted_ptr + req, accepted)


@triton.jit
def _residual(
    s, cut, log_norm, q_x, q_cut, q_log_norm, weight, offs, drop_token, bonus, SAMPLED: tl.constexpr
):
    """(the law's unnormalised weight, p) at a block of the row."""
    p = tl.where((s >= cut) & (s > -float("inf")), tl.exp(s - log_norm), 0.0)
    if SAMPLED:
        q = tl.where((q_x >= q_cut) & (q_x > -float("inf")), tl.exp(q_x - q_log_norm), 0.0)
        r = tl.where(bonus, p, tl.maximum(weight * p - q, 0.0))
    else:
        r = tl.where(offs == drop_token, 0.0, p)
    return r, p


@triton.jit
def _draw_kernel(
    logits_ptr, stride, temperature_ptr, cut_ptr, log_norm_ptr, accepted_ptr, last_ptr, n_draft,
    drafts_ptr, drop_ptr, q_logits_ptr, q_stride, q_temperature_ptr, q_cut_ptr, q_log_norm_ptr,
    weight_ptr, uniform_ptr, out_ptr, vocab,
    SAMPLED: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    req = tl.program_id(0).to(tl.int64)
    a = tl.load(accepted_ptr + req)
    row = req * (n_draft + 1) + a
    base = logits_ptr + row * stride
    temperature = tl.load(temperature_ptr + row)
    cut = tl.load(cut_ptr + row)
    log_norm = tl.load(log_norm_ptr + row)
    bonus = a >= tl.load(last_ptr + req)
    drop_token = -1
    q_base = q_logits_ptr
    q_temperature = 1.0
    q_cut = 0.0
    q_log_norm = 0.0
    weight = 1.0
    if SAMPLED:
        q_base = q_logits_ptr + req * q_stride
        q_temperature = tl.load(q_temperature_ptr + req)
        q_cut = tl.load(q_cut_ptr + req)
        q_log_norm = tl.load(q_log_norm_ptr + req)
        if weight_ptr is not None:
            weight = tl.load(weight_ptr + req)
    else:  # the rejected draft leaves the law (drop: not the bonus, and p(d) < 1)
        d = tl.load(drafts_ptr + req * n_draft + tl.minimum(a, n_draft - 1))
        drop_token = tl.where(tl.load(drop_ptr + req) != 0, d, -1)
    offs = tl.arange(0, BLOCK)

    mass = tl.zeros([BLOCK], tl.float32)
    p_mass = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        ok = start + offs < vocab
        s = tl.math.div_rn(
            tl.load(base + start + offs, mask=ok, other=-float("inf")).to(tl.float32), temperature
        )
        q_x = s
        if SAMPLED:
            q_raw = tl.load(q_base + start + offs, mask=ok, other=-float("inf")).to(tl.float32)
            q_x = tl.math.div_rn(q_raw, q_temperature)
        r, p = _residual(
            s, cut, log_norm, q_x, q_cut, q_log_norm, weight, start + offs, drop_token, bonus, SAMPLED
        )
        mass += r
        p_mass += p
    total = tl.sum(mass, axis=0)
    use_p = total <= 0.0  # an empty residual: the law is p itself (sampled_verify's final_law)
    total = tl.where(use_p, tl.sum(p_mass, axis=0), total)
    target = tl.load(uniform_ptr + req) * total

    carry = 0.0
    token = vocab - 1
    found = 0
    for start in range(0, vocab, BLOCK):
        ok = start + offs < vocab
        s = tl.math.div_rn(
            tl.load(base + start + offs, mask=ok, other=-float("inf")).to(tl.float32), temperature
        )
        q_x = s
        if SAMPLED:
            q_raw = tl.load(q_base + start + offs, mask=ok, other=-float("inf")).to(tl.float32)
            q_x = tl.math.div_rn(q_raw, q_temperature)
        r, p = _residual(
            s, cut, log_norm, q_x, q_cut, q_log_norm, weight, start + offs, drop_token, bonus, SAMPLED
        )
        r = tl.where(use_p, p, r)
        cumulative = tl.cumsum(r, axis=0) + carry
        first = tl.min(tl.where((cumulative > target) & ok, start + offs, vocab), axis=0)
        token = tl.where((found == 0) & (first < vocab), first, token)
        found = found | (first < vocab).to(tl.int32)
        carry += tl.sum(r, axis=0)
    tl.store(out_ptr + req, token)


def row_law(law) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A RowLaw's (temperature, cut, log_norm) as the kernels read them."""
    return law.temperature.float().contiguous(), law.cut.contiguous(), law.log_norm.contiguous()


def accept(logits, law, drafts, uniform, q_draft=None, counts=None) -> torch.Tensor:
    """[bs] accepted drafts: `law` is the verify rows' RowLaw; q_draft None for point drafts."""
    bs, n_draft = drafts.shape
    out = torch.empty(bs, dtype=torch.int64, device=logits.device)
    q_draft = None if q_draft is None else q_draft.float().contiguous()
    _accept_kernel[(bs,)](
        logits, logits.stride(0), *row_law(law), drafts.contiguous(), q_draft, uniform.float().contiguous(),
        None if counts is None else counts.contiguous(), out, n_draft,
    )  # fmt: skip
    return out


def draw(
    logits, law, drafts, accepted, uniform, p_draft=None, q=None, weight=None, counts=None
) -> torch.Tensor:
    """[bs] the token each request adds at its position `accepted`, by the inverse CDF at `uniform`.

    Point drafts: `p_draft` [bs, n] (the rejected draft is dropped when p(d) < 1, as final_probs
    does), or None: dropped at every rejection (a rejected draft has p(d) < 1 but for rounding, and
    a law left empty falls back to p). Sampled drafts: `q` = (logits [bs, V] of the drafter at each
    request's rejected row, RowLaw of those rows); `weight` [bs] block verification's prefix weight
    (None: 1)."""
    bs, n_draft = drafts.shape
    vocab = logits.shape[-1]
    last = torch.full((bs,), n_draft, dtype=torch.int64, device=logits.device) if counts is None else counts
    out = torch.empty(bs, dtype=torch.int64, device=logits.device)
    drop = None
    if q is None:  # final_probs' guard: drop the draft unless the bonus or p(d) = 1
        drop = accepted < last
        if p_draft is not None:
            p_at = torch.cat([p_draft, p_draft.new_ones(bs, 1)], dim=1).gather(1, accepted.unsqueeze(1))
            drop &= p_at.squeeze(1) < 1.0
        drop = drop.to(torch.int32)
        q_logits, q_law = logits, law  # unused
    else:
        q_logits, q_law = q
    _draw_kernel[(bs,)](
        logits, logits.stride(0), *row_law(law), accepted.contiguous(), last.contiguous(), n_draft,
        drafts.contiguous(), drop, q_logits, q_logits.stride(0), *row_law(q_law),
        None if weight is None else weight.float().contiguous(),
        uniform.float().contiguous(), out, vocab, SAMPLED=q is not None, BLOCK=BLOCK,
    )  # fmt: skip
    return out
