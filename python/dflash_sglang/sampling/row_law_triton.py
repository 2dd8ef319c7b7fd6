"""`target_law.row_laws` on CUDA as one fused Triton kernel: each row's (cut, log_norm), no sort.

One program per verify row, looping over the row's V logits in blocks. With s = logits /
temperature (an IEEE division, as torch's), the kept set {s >= cut} is the largest of three cuts:

  top-k  the smallest existing value v with count(s > v) <= k - 1 (the k-th largest: ties at it
         are all kept, which is what `scaled >= kth` keeps on the torch path);
  top-p  the smallest existing value v with mass(s > v) <= top_p * Z (the torch path's
         "exclusive cumulative probability <= top_p" at the first token of v's tie group);
  min-p  the floor f = max(s) + log(min_p), not necessarily an existing value.

Both searched conditions hold for every value above the answer and fail below it, so the kernel
looks for the smallest existing v >= f where both hold (if they already hold at f, the cut is f):

  pass 1      max, smallest finite value and count of finite values (no exp);
  search      each pass evaluates 16 thresholds at once (the current lower bound, the lowest
              candidate, 14 evenly spaced up to the interval's largest value): count and mass
              above each, plus the smallest value above and largest value at or below each. The
              interval shrinks to the section where the conditions flip, tightened to its own
              smallest and largest values; it ends when the first candidate already passes or the
              section holds a single distinct value (the cut, an existing value: exact, ties kept).
              Every pass removes at least one distinct value and typically 15/16 of the range;
              float32's range bounds it (< 80 passes even adversarially; random rows take 1-4);
  last pass   log_norm = max + log(sum of exp(s - max) over s >= cut).

Z, the row's whole mass, is the first search pass's mass above -inf. Nothing grows with V but
the logits read: outputs are [rows]; no host sync. The plan's flags (which filters the batch has)
are applied by the wrapper (a filter the batch's plan skips is passed as off), so rows ignore
a filter exactly where the torch path does.

Tested on CPU under Triton's interpreter against the torch path (tests/test_row_law_triton.py);
no GPU timing exists yet.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PIVOTS = 16  # thresholds a search pass evaluates (slot 0: the interval's lower bound)
BLOCK = 1024  # logits a 1-D pass reads per step
SEARCH_BLOCK = 128  # logits a search pass reads per step ([SEARCH_BLOCK, PIVOTS] temporaries)
MAX_PASSES = 128  # the search's bound (float32 needs under 80); it only guards NaN rows


@triton.jit
def _row_law_kernel(
    logits_ptr,
    stride,
    vocab,
    temperature_ptr,
    top_k_ptr,
    top_p_ptr,
    log_min_p_ptr,
    cut_ptr,
    log_norm_ptr,
    passes_ptr,  # None, or [rows] int32: search passes per row (for tests and timing)
    BLOCK: tl.constexpr,
    SEARCH_BLOCK: tl.constexpr,
    PIVOTS: tl.constexpr,
    MAX_PASSES: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride
    temperature = tl.load(temperature_ptr + row)
    inf = float("inf")

    # Pass 1: max, smallest finite, number of finite values.
    offs = tl.arange(0, BLOCK)
    top = tl.full([BLOCK], -inf, tl.float32)
    low = tl.full([BLOCK], inf, tl.float32)
    finite = tl.zeros([BLOCK], tl.int32)
    for start in range(0, vocab, BLOCK):
        x = tl.load(base + start + offs, mask=start + offs < vocab, other=-inf).to(tl.float32)
        s = tl.math.div_rn(x, temperature)
        ok = (s > -inf) & (s < inf)
        top = tl.maximum(top, s)
        low = tl.minimum(low, tl.where(ok, s, inf))
        finite += ok.to(tl.int32)
    row_max = tl.max(top, axis=0)
    min_in = tl.min(low, axis=0)
    n_finite = tl.sum(finite, axis=0)

    # The limits: count(s > v) <= k_limit, mass(s > v) <= top_p * Z; the floor from min-p. The
    # wrapper passes a filter the plan leaves off as top_k = V, top_p = 1, log(min_p) = -inf.
    top_k = tl.load(top_k_ptr + row)
    k_limit = tl.where(top_k < vocab, tl.maximum(top_k, 1) - 1, vocab)
    top_p = tl.load(top_p_ptr + row)
    p_off = top_p >= 1.0
    floor = row_max + tl.load(log_min_p_ptr + row)  # log(0) = -inf: no floor

    # Below every finite value the conditions hold only without top-p and with k past the count.
    done = ((n_finite <= k_limit) & p_off) | (n_finite == 0)
    cut = floor
    lo = temperature * 0.0 - inf  # the conditions fail at lo (or lo is -inf), hold at max_in
    max_in = row_max
    total = temperature * 0.0 - 1.0  # Z, set by the first search pass (-1: not yet)
    slots = tl.arange(0, PIVOTS)
    passes = 0
    while (done == 0) & (passes < MAX_PASSES):
        first = tl.maximum(min_in, floor)
        span = max_in - first
        pivots = first + span * ((slots - 1).to(tl.float32) / (PIVOTS - 1))
        pivots = tl.where(slots == 0, lo, pivots)
        count = tl.zeros([PIVOTS], tl.int32)
        mass = tl.zeros([PIVOTS], tl.float32)
        above_min = tl.full([PIVOTS], inf, tl.float32)
        at_most_max = tl.full([PIVOTS], -inf, tl.float32)
        offs_s = tl.arange(0, SEARCH_BLOCK)
        for start in range(0, vocab, SEARCH_BLOCK):
            x = tl.load(base + start + offs_s, mask=start + offs_s < vocab, other=-inf).to(tl.float32)
            s = tl.math.div_rn(x, temperature)
            e = tl.exp(s - row_max)
            gt = s[:, None] > pivots[None, :]
            count += tl.sum(gt.to(tl.int32), axis=0)
            mass += tl.sum(tl.where(gt, e[:, None], 0.0), axis=0)
            above_min = tl.minimum(above_min, tl.min(tl.where(gt, s[:, None], inf), axis=0))
            at_most_max = tl.maximum(at_most_max, tl.max(tl.where(gt, -inf, s[:, None]), axis=0))
        if total < 0.0:
            total = tl.sum(tl.where(slots == 0, mass, 0.0), axis=0)  # lo is -inf in the first pass
        budget = tl.where(p_off, inf, top_p * total)
        holds = (count <= k_limit) & (mass <= budget) & (slots > 0)
        flip = tl.min(tl.where(holds, slots, PIVOTS), axis=0)  # first threshold that holds
        new_lo = tl.max(tl.where(slots == flip - 1, pivots, -inf), axis=0)
        new_min = tl.min(tl.where(slots == flip - 1, above_min, inf), axis=0)
        new_max = tl.where(flip == PIVOTS, max_in, tl.max(tl.where(slots == flip, at_most_max, -inf), axis=0))
        # The first candidate holds: the cut is it (min_in itself, or the floor above min_in).
        cut = tl.where(flip == 1, first, new_min)
        done = (flip == 1) | (new_min == new_max)
        lo = new_lo
        min_in = new_min
        max_in = new_max
        passes += 1

    # Last pass: the normaliser over the kept set.
    kept = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        x = tl.load(base + start + offs, mask=start + offs < vocab, other=-inf).to(tl.float32)
        s = tl.math.div_rn(x, temperature)
        kept += tl.where((s >= cut) & (s > -inf), tl.exp(s - row_max), 0.0)
    log_norm = row_max + tl.log(tl.sum(kept, axis=0))
    tl.store(cut_ptr + row, cut)
    tl.store(log_norm_ptr + row, log_norm)
    if passes_ptr is not None:
        tl.store(passes_ptr + row, passes)


def row_laws_triton(
    logits, temperature, top_k, top_p, min_p, plan, passes=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, V] logits (float32 or bf16) and per-row settings -> (cut, log_norm), [rows] float32.

    `plan` is target_law's LawPlan: a filter the torch path skips for this batch is off here too.
    `passes`: an optional [rows] int32 tensor that receives each row's number of search passes.
    """
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    cut = torch.empty(rows, dtype=torch.float32, device=logits.device)
    log_norm = torch.empty_like(cut)
    if rows == 0:
        return cut, log_norm
    # The filters the torch path applies to this batch (row_cut's branches); the others are off.
    if not (plan.sort or plan.window):
        top_k = torch.full_like(cut, vocab, dtype=torch.int32)
    if not (plan.top_p and (plan.sort or plan.window)):
        top_p = torch.ones_like(cut)
    log_min_p = torch.log(min_p.float()) if plan.min_p else torch.full_like(cut, float("-inf"))
    _row_law_kernel[(rows,)](
        logits,
        logits.stride(0),
        vocab,
        temperature.float().contiguous(),
        top_k.clamp(max=vocab).to(torch.int32).contiguous(),
        top_p.float().contiguous(),
        log_min_p.contiguous(),
        cut,
        log_norm,
        passes,
        BLOCK=BLOCK,
        SEARCH_BLOCK=SEARCH_BLOCK,
        PIVOTS=PIVOTS,
        MAX_PASSES=MAX_PASSES,
        num_warps=8,
    )
    return cut, log_norm
