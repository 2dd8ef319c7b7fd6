"""The target's sampling law per verified row, without [rows, V] probability matrices.

SGLang's sampler keeps, per request, a prefix of the tokens sorted by probability: the first
top_k, those whose exclusive cumulative probability is <= top_p, those with probability >=
min_p * max. All three are prefixes of the same order, so the kept set is {x : s_x >= cut} for
one cut value per row (s = logits / temperature), and the law is p(x) = exp(s_x - log_norm) on it.
`row_laws` finds (cut, log_norm) per row in passes over row chunks, so at most a few [chunk, V]
float tensors are alive at once; everything after needs p at a handful of tokens only.

How the cut is found (all exact; the choice is made on the host from the batch's parameters):
  top-k   the batch's largest finite top_k bounds a torch.topk window holding every row's cut;
  min-p   a threshold: s_x >= s_max + log(min_p), no sort;
  top-p   inside that window when every top-p row has a finite top_k; a row with top_p < 1 and
          no top_k may keep most of the vocabulary, so its cut comes from a full sort of its
          chunk (the only sort left: with no bound on the kept set there is no smaller exact one).
Ties at the cut keep every tied token (a sort would keep an arbitrary subset of them).
On CUDA, `row_laws` hands the same question to one fused Triton kernel (row_law_triton.py: a
threshold search, no sort); `DFLASH_SGLANG_TRITON_ROW_LAW=0` keeps the torch passes there too.

Engine-free: no SGLang imports, no host reads of device data (the overlap worker calls this).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..environment import TRITON_ROW_LAW

# Bytes of one [chunk, V] float32 temporary; a pass holds a few of them (see docs/benchmarks.md).
CHUNK_BYTES = 64 << 20
# The extra memory a verify's draws and masses may hold beyond the logits themselves (the target's
# verify logits, the drafter's logits for q): issue 57's bound, 128 MiB at batch 64, V 248,320.
# Their passes run over row chunks sized by `rows_within` (tests/test_bounded_memory.py measures).
EXTRA_BYTES = 128 << 20
# [chunk, V] float32 tensors a chunked pass holds at its peak (p and q's rows or a law and the
# draw's noise, a kept-set mask, bf16 rows before their cast): measured at 2.3 or less, so 3.
TEMPORARIES = 3
# Devices whose logits take the fused Triton kernel (row_law_triton.py): CUDA unless the switch is
# off; CPU never (the interpreter test sets ("cpu",) to drive this branch under TRITON_INTERPRET).
TRITON_ROW_LAW_DEVICES = ("cuda",) if TRITON_ROW_LAW.value() else ()


@dataclass(frozen=True)
class LawPlan:
    """Host-side: which passes this batch needs. Built from host values only."""

    window: int  # torch.topk width per row (0: none); covers every finite top_k that matters
    sort: bool  # some row may keep past the window under top-p: sort each chunk
    top_p: bool
    min_p: bool


def plan_for(sampling_info, vocab: int, reqs=None) -> LawPlan:
    """SamplingBatchInfo (+ the requests' host parameters when given) -> the passes to run.

    `max_top_k` is SGLang's host bound on every row's top_k (None when some row has none). Without
    it, the requests' own parameters give the bound of the finite ones; without those, sort.
    """
    need_top_k = bool(getattr(sampling_info, "need_top_k_sampling", True))
    top_p = bool(getattr(sampling_info, "need_top_p_sampling", True))
    min_p = bool(getattr(sampling_info, "need_min_p_sampling", False))
    bound = getattr(sampling_info, "max_top_k", None)
    if bound is not None:
        sort = False
    elif reqs is not None:
        params = [r.sampling_params for r in reqs]
        bound = max((p.top_k for p in params if p.top_k < vocab), default=0)
        sort = any(p.top_k >= vocab and p.top_p < 1.0 for p in params)
    else:
        bound, sort = (vocab if need_top_k else 0), top_p
    window = 0 if sort or not need_top_k else min(int(bound), vocab)
    return LawPlan(window=window, sort=sort, top_p=top_p, min_p=min_p)


@dataclass
class RowLaw:
    """Per verified row: keep s >= cut, p(x) = exp(s_x - log_norm). All [rows] float32."""

    temperature: torch.Tensor
    cut: torch.Tensor
    log_norm: torch.Tensor

    def log_prob(self, scaled: torch.Tensor, rows: slice | torch.Tensor = slice(None)) -> torch.Tensor:
        """log p of scaled logits [n, m] at rows `rows` (-inf outside the kept set)."""
        cut, norm = self.cut[rows].unsqueeze(-1), self.log_norm[rows].unsqueeze(-1)
        return torch.where(scaled >= cut, scaled - norm, float("-inf"))

    def log_prob_(self, scaled: torch.Tensor, rows: slice | torch.Tensor = slice(None)) -> torch.Tensor:
        """`log_prob` written over `scaled` itself (the same values; no second [n, m] tensor)."""
        drop = (scaled >= self.cut[rows].unsqueeze(-1)).logical_not_()
        return scaled.sub_(self.log_norm[rows].unsqueeze(-1)).masked_fill_(drop, float("-inf"))

    def prob_(self, scaled: torch.Tensor, rows: slice | torch.Tensor = slice(None)) -> torch.Tensor:
        """p of scaled logits [n, m] at rows `rows`, written over `scaled` (0 outside the kept set)."""
        return self.log_prob_(scaled, rows).exp_()

    def part(self, rows: slice) -> RowLaw:
        """The law of the rows `rows` (views)."""
        return RowLaw(self.temperature[rows], self.cut[rows], self.log_norm[rows])


def chunks(total: int, step: int):
    """Slices of at most `step` covering range(total): host shapes only, no device read."""
    for start in range(0, total, step):
        yield slice(start, min(start + step, total))


def rows_within(vocab: int, held: int = 0, temporaries: int = TEMPORARIES) -> int:
    """Rows a chunk may hold so that `temporaries` [rows, V] float32 tensors, beside `held` bytes
    already kept, stay within EXTRA_BYTES (at least one row)."""
    return max(1, (EXTRA_BYTES - held) // (temporaries * 4 * vocab))


def scaled_rows(logits: torch.Tensor, rows: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """[n, V] float32 logits[rows] / temperature[rows], a fresh tensor divided in place (a mixed
    bf16 / float32 division would cast a third copy on CPU)."""
    picked = logits.index_select(0, rows).float()
    return picked.div_(temperature[rows].unsqueeze(-1))


def chunk_rows(vocab: int) -> int:
    return max(1, CHUNK_BYTES // (4 * vocab))


def row_laws(logits: torch.Tensor, sampling_info, block_size: int, plan: LawPlan) -> RowLaw:
    """[bs * B, V] verify logits -> the kept set and normaliser of every row (not modified)."""
    rows, vocab = logits.shape

    def per_row(values: torch.Tensor) -> torch.Tensor:
        return values.reshape(-1).repeat_interleave(block_size)  # request -> its B rows

    temperature = per_row(sampling_info.temperatures.float())
    top_k = per_row(sampling_info.top_ks.to(torch.int64))
    top_p = per_row(sampling_info.top_ps.float())
    min_p = per_row(sampling_info.min_ps.float())
    if logits.device.type in TRITON_ROW_LAW_DEVICES:  # one fused kernel, the same (cut, log_norm)
        from .row_law_triton import row_laws_triton

        return RowLaw(temperature, *row_laws_triton(logits, temperature, top_k, top_p, min_p, plan))
    cut = torch.empty(rows, dtype=torch.float32, device=logits.device)
    log_norm = torch.empty_like(cut)
    step = chunk_rows(vocab)
    for start in range(0, rows, step):
        part = slice(start, min(start + step, rows))
        scaled = logits[part].float() / temperature[part].unsqueeze(-1)
        cut[part] = row_cut(scaled, top_k[part], top_p[part], min_p[part], plan)
        kept = torch.where(scaled >= cut[part].unsqueeze(-1), scaled, float("-inf"))
        del scaled
        log_norm[part] = torch.logsumexp(kept, dim=-1)
    return RowLaw(temperature, cut, log_norm)


def row_cut(scaled, top_k, top_p, min_p, plan: LawPlan) -> torch.Tensor:
    """The smallest kept scaled logit of each row of a [n, V] chunk (-inf: keep everything)."""
    vocab = scaled.shape[-1]
    none = torch.full_like(top_p, float("-inf"))
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True) if plan.top_p else None
    if plan.sort:
        ordered = scaled.sort(dim=-1, descending=True).values
    elif plan.window:
        ordered = scaled.topk(plan.window, dim=-1).values  # sorted, largest first
    elif plan.min_p:
        ordered = scaled.max(dim=-1, keepdim=True).values
    else:
        return none  # temperature only: everything is kept
    width = ordered.shape[-1]
    cut = none
    if plan.sort or plan.window:  # top-k: the k-th largest (k >= V: no cut)
        kth = ordered.gather(-1, (top_k.clamp(1, width) - 1).unsqueeze(-1)).squeeze(-1)
        cut = torch.where(top_k < vocab, kth, none)
    if plan.top_p and (plan.sort or plan.window):
        probs = (ordered - lse).exp_()
        before = probs.cumsum(dim=-1).sub_(probs)  # exclusive cumulative probability
        count = (before <= top_p.unsqueeze(-1)).sum(-1)  # >= 1: the first token is always kept
        del probs, before
        nth = ordered.gather(-1, (count.clamp(max=width) - 1).unsqueeze(-1)).squeeze(-1)
        # count == width without a sort: the cut lies past the window, below this row's top-k cut.
        inside = (count < width) | plan.sort
        cut = torch.maximum(cut, torch.where((top_p < 1.0) & inside, nth, none))
    if plan.min_p:
        floor = ordered[:, 0] + torch.log(min_p)  # log(0) = -inf: no cut
        cut = torch.maximum(cut, floor)
    return cut


def is_greedy(sampling_info) -> bool:
    """Whether the batch decodes greedily: every request at temperature 0 (SGLang's own flag), or
    no sampling info at all (a warm-up). The one test the drafting and verify phases use."""
    return sampling_info is None or sampling_info.is_all_greedy


def draw_every_row(logits: torch.Tensor, sampling_info, width: int, reqs) -> torch.Tensor:
    """[bs, N] the target's token at every row (a tree's nodes): argmax, or one draw of its law,
    over row chunks (one multinomial each: on CPU the same draws as one call under one seed)."""
    if is_greedy(sampling_info):
        return logits.argmax(-1).view(-1, width)
    law = row_laws(logits, sampling_info, width, plan_for(sampling_info, logits.shape[-1], reqs))
    drawn = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
    for part in chunks(logits.shape[0], rows_within(logits.shape[-1])):  # bounded temporaries
        scaled = logits[part].to(torch.float32, copy=True).div_(law.temperature[part].unsqueeze(-1))
        probs = torch.softmax(law.log_prob_(scaled, part), dim=-1)
        del scaled
        drawn[part] = torch.multinomial(probs, 1).view(-1)
        del probs  # before the next chunk's rows
    return drawn.view(-1, width)
