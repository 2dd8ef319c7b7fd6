"""DFlash2's sampled walk at temperature > 0 (the default; DFLASH_SGLANG_SAMPLED_DRAFTS=0 walks
greedily): SGLang's own.

The selector's lattice (drafter/selector.py) scores each position's K candidates given the one
chosen before. At temperature > 0 SGLang 0.5.23 walks it by sampling: the first candidate from
softmax(scores / T), then each position's from the chosen predecessor's transition row, with
greedy rows (top_k 1) on the argmax (`CandidateSelector.sample_path`, its pure-torch branch off
CUDA; `resolve_greedy_mask`). The verify then gets q over the K candidates at each position
(sampling/sampled_drafts.CandidateProposal) and judges the drafts with min(1, p/q) and the
residual max(p - q, 0). Those are SGLang's functions, called here with our selector as `self`: they
read only its `top_k`.
"""

from __future__ import annotations

import torch
from sglang.srt.models.dflash import CandidateSelector as SGLangCandidateSelector
from sglang.srt.speculative.dspark_components.dspark_draft import resolve_greedy_mask

from ..sampling.sampled_drafts import CandidateProposal
from .selector import CandidateSelector, unary_scores


def sampled_walk(
    selector: CandidateSelector, config, values, ids, hidden, anchor, sampling_info, uniforms=None
) -> tuple[torch.Tensor, CandidateProposal]:
    """Each position's top-k (logits, ids) [b, S, K] and features [b, S, H] -> the drafts [b, S]
    sampled along the lattice, and the q they were drawn from. `uniforms` [b, S]: the walk's
    draws (fresh ones when None)."""
    unary = unary_scores(values, config.output_multiplier, config.final_logit_softcapping)
    scores = selector.lattice(ids, unary, hidden, anchor)
    bs, size = ids.shape[:2]
    if uniforms is None:
        uniforms = torch.rand((bs, size), dtype=torch.float32, device=ids.device)
    temperatures = sampling_info.temperatures.view(-1)[:bs].to(torch.float32).clamp(min=1e-5)
    greedy = resolve_greedy_mask(bs=bs, sampling_info=sampling_info, device=ids.device)
    tokens, q_rows = SGLangCandidateSelector.sample_path(
        selector, candidate_ids=ids, scores=scores, uniforms=uniforms, temperatures=temperatures,
        greedy_mask=greedy,
    )  # fmt: skip
    chosen = (ids == tokens.unsqueeze(-1)).to(torch.int64).argmax(-1, keepdim=True)
    q_draft = q_rows.gather(-1, chosen).squeeze(-1)
    return tokens, CandidateProposal(q_draft, ids, q_rows)
