"""DFlash2's candidate selector (`architectures: ["DFlash2DraftModel"]`, `dflash_config.selector_rank`
and `selector_top_k`), as SGLang 0.5.23 defines it (`CandidateSelector` in sglang/srt/models/dflash.py).

The DFlash backbone's hidden state at each block position gives K candidates through the target's
LM head (its top-k logits, scaled by `output_multiplier` and soft-capped by
`final_logit_softcapping`: the unary scores). Adjacent positions are linked by K x K transition
scores from two low-rank [vocab, r] tables:

    score[e, p, c] = unary[e, c] + < A[pred(e, p)] * W h[e], B[cand(e, c)] >

where pred(e, p) is candidate p of position e - 1, and the verified token for position 0. The
draft is one walk over that lattice: the best first candidate, then at each position the best
successor of the one chosen before. The drafts are point proposals, so the verify's acceptance
(greedy, or rejection sampling against a point mass) is the chain's and the output stays exact.
Engine-free; the SGLang drafter runs this same code after its own vocab-parallel top-k.
"""

from __future__ import annotations

import torch
from torch import nn


class CandidateSelector(nn.Module):
    """Checkpoint names: `candidate_selector.{predecessor,successor}_codebook` [vocab, r],
    `candidate_selector.hidden_projection.weight` [r, hidden]."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab_size, rank))
        self.hidden_projection = nn.Linear(hidden_size, rank, bias=False)

    def lattice(self, ids: torch.Tensor, unary: torch.Tensor, hidden: torch.Tensor, anchor: torch.Tensor):
        """ids, unary [b, S, K]; hidden [b, S, H]; anchor [b] (the verified token) -> [b, S, K, K]."""
        first = anchor.view(-1, 1, 1).expand(-1, 1, self.top_k)
        predecessors = self.predecessor_codebook[torch.cat([first, ids[:, :-1]], dim=1)]  # [b, S, K, r]
        state = self.hidden_projection(hidden.to(self.hidden_projection.weight.dtype))
        successors = self.successor_codebook[ids]
        edges = torch.einsum("bspr,bscr->bspc", predecessors * state[:, :, None], successors)
        return unary[:, :, None].float() + edges.float()

    @staticmethod
    def greedy_walk(ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """The drafts [b, S]: the best first candidate, then each position's best successor."""
        index = scores[:, 0, 0].argmax(-1)  # position 0's rows all follow the verified token
        path = [index]
        best_next = scores[:, 1:].argmax(-1)  # [b, S-1, K]: the best successor of each candidate
        for position in range(best_next.shape[1]):
            index = best_next[:, position].gather(-1, index[:, None])[:, 0]
            path.append(index)
        return ids.gather(-1, torch.stack(path, dim=1).unsqueeze(-1))[..., 0]


def unary_scores(values: torch.Tensor, multiplier: float, softcap: float | None) -> torch.Tensor:
    """The top-k logits as the selector scores them (SGLang's `_transform_unary_logits`)."""
    values = values.float() * multiplier
    return values if softcap is None else torch.tanh(values / softcap) * softcap


def walk_candidates(selector: CandidateSelector, config, values, ids, hidden, anchor) -> torch.Tensor:
    """Each position's top-k (logits, ids) [b, S, K] and features [b, S, H] -> the drafts [b, S]."""
    unary = unary_scores(values, config.output_multiplier, config.final_logit_softcapping)
    return selector.greedy_walk(ids, selector.lattice(ids, unary, hidden, anchor))


def select_drafts(selector: CandidateSelector, config, logits: torch.Tensor, hidden, anchor) -> torch.Tensor:
    """Engine-free: full draft logits [b, S, V] (the target's LM head) -> the selector's drafts."""
    values, ids = torch.topk(logits.float(), selector.top_k, dim=-1)
    return walk_candidates(selector, config, values, ids, hidden, anchor)
