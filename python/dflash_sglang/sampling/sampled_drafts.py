"""Drafts sampled from the drafter's own law at temperature > 0, and what the verify keeps of it.

A point draft d (the drafter's argmax) is accepted with probability p(d). A draft sampled from
a law q is accepted with probability min(1, p(d) / q(d)), and after a rejection at position a
the target's token is drawn from normalise(max(p_a - q_a, 0)): lossless for any q (speculative
sampling), and worth more accepted tokens where q is close to p and p is not peaked.

q is the request's own sampling law applied to the drafter's logits: its temperature, then its
top-k / top-p / min-p (target_law's cut), so a greedy row (SGLang gives it top_k 1) keeps its
argmax point draft in the same batch, and a filtered request proposes inside the drafter's
version of its filter. Penalties and grammars stay the target's alone: any q is exact.

Memory: no [bs, B-1, V] tensor outlives the draw. The draw runs over row chunks (Gumbel-max over
the kept set, one LM-head product a chunk); the verify keeps q(d) per draft, each row's cut and
normaliser, and the drafter's features [bs, B-1, H]. From them a verify step reads the LM head's
weight once: token by token, one [bs, H] product for the one row per request that a rejection
needs (`rows`); as a block, one [bs * (B-1), H] product for q's rows at every position
(`every_row`: the residual masses and the rejected position's q all slice it), alive during that
verify only.

No host reads of device data: the overlap worker draws on its drafter stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..environment import SAMPLED_DRAFTS
from .block_verify import block_verification_for
from .target_law import RowLaw, chunk_rows, plan_for, row_cut, scaled_rows

SAMPLED_DRAFTS_ENV = SAMPLED_DRAFTS.name


def sampled_drafts_requested() -> bool:
    """The switch: `1` or unset samples the drafts at temperature > 0 (the default: on the tiny
    pair's held-out prompts they commit 1.09-1.21x the tokens a step of point drafts at T 0.6-1.0,
    docs/sampled-drafts.md); `0` keeps point drafts (the drafter's argmax, DFlash2's greedy walk)."""
    return SAMPLED_DRAFTS.value()


def drafts_at_temperature(draft_model, tree, simulated, block: bool) -> tuple[bool, bool, str]:
    """Whether this server samples its drafts at temperature > 0, whether it verifies them as a
    block (`block`: SGLang's `--speculative-use-block-verification`), and the startup log's words."""
    sampled, words = drafts_are(draft_model, tree, simulated)
    block, block_words = block_verification_for(bool(block), sampled)
    return sampled, block, words + block_words


def drafts_are(draft_model, tree, simulated) -> tuple[bool, str]:
    """Whether this server samples its drafts at temperature > 0, and the startup log's words."""
    if not sampled_drafts_requested():
        return False, f"point drafts ({SAMPLED_DRAFTS_ENV}=0)"
    if draft_model.prefix_gru is not None:
        why = "Domino's rollout drafts one point path"
    elif tree is not None:
        why = "trees verify point drafts"
    elif simulated is not None:
        why = "simulated acceptance"
    elif draft_model.candidate_selector is not None:
        return (
            True,
            f"DFlash2's sampled walk, SGLang's sample_path ({SAMPLED_DRAFTS_ENV}=0 keeps point drafts)",
        )
    else:
        return True, f"sampled from the drafter's law ({SAMPLED_DRAFTS_ENV}=0 keeps point drafts)"
    return False, f"point drafts ({why})"


@dataclass
class DraftProposal:
    """The law the drafts were drawn from: q(d) at every draft, and q's row at any position."""

    q_draft: torch.Tensor  # [bs, S] q_i(d_i)
    features: torch.Tensor  # [bs, S, H] the drafter's features at the draft positions
    law: RowLaw  # per draft row (bs * S): the request's temperature, q's cut and normaliser
    logits_of: Callable[[torch.Tensor], torch.Tensor]  # [n, H] -> [n, V] through the LM head
    logits: torch.Tensor | None = None  # [bs * S, V] the drafter's logits at every draft (every_row)

    def narrow(self, n_draft: int) -> DraftProposal:
        """The first `n_draft` positions of every request (a verify narrower than the block)."""
        bs, size = self.q_draft.shape
        if n_draft == size:
            return self
        rows = torch.arange(bs * size, device=self.q_draft.device).view(bs, size)[:, :n_draft].flatten()
        law = RowLaw(self.law.temperature[rows], self.law.cut[rows], self.law.log_norm[rows])
        logits = None if self.logits is None else self.logits.index_select(0, rows)
        return DraftProposal(
            self.q_draft[:, :n_draft], self.features[:, :n_draft], law, self.logits_of, logits
        )

    def every_row(self) -> DraftProposal:
        """This proposal with the drafter's logits at all its bs * S draft rows, from ONE LM-head
        product ([bs * S, H] by the [V, H] weight: one read of it); `rows` then slices them. For a
        verify that needs q at every position (block verification's residual masses); the
        [bs * S, V] logits live as long as the returned proposal, the verify step."""
        if self.logits is not None or self.q_draft.shape[1] == 0:
            return self
        logits = self.logits_of(self.features.flatten(0, 1))
        return DraftProposal(self.q_draft, self.features, self.law, self.logits_of, logits)

    def requests(self, part: slice) -> DraftProposal:
        """The requests `part` of the batch (views: nothing copied, no LM head)."""
        size = self.q_draft.shape[1]
        rows = slice(part.start * size, part.stop * size)
        logits = None if self.logits is None else self.logits[rows]
        return DraftProposal(
            self.q_draft[part], self.features[part], self.law.part(rows), self.logits_of, logits
        )

    def rows(self, position: torch.Tensor, vocab: int) -> torch.Tensor:
        """[bs, V]: q at one draft position per request (`position` [bs], each < S): sliced from
        `every_row`'s logits when kept, else one [bs, H] LM-head product (scaled in place: the
        head's output is a fresh tensor). One [bs, V] float32 tensor, plus a bool mask."""
        bs, size = self.q_draft.shape
        flat = torch.arange(bs, device=position.device) * size + position
        if self.logits is None:
            logits = self.logits_of(self.features[torch.arange(bs, device=position.device), position])
            scaled = logits.float().div_(self.law.temperature[flat].unsqueeze(-1))
        else:
            scaled = scaled_rows(self.logits, flat, self.law.temperature)
        return self.law.prob_(scaled, flat)

    def logits_at(self, position: torch.Tensor) -> tuple[torch.Tensor, RowLaw]:
        """The drafter's raw logits [bs, V] at one draft position per request and those rows' law,
        as the Triton draw reads them (accept_triton.draw's `q`): `rows` without the division,
        from the same one LM-head product or `every_row`'s slice."""
        bs, size = self.q_draft.shape
        flat = torch.arange(bs, device=position.device) * size + position
        if self.logits is None:
            logits = self.logits_of(self.features[torch.arange(bs, device=position.device), position])
        else:
            logits = self.logits.index_select(0, flat)
        law = RowLaw(self.law.temperature[flat], self.law.cut[flat], self.law.log_norm[flat])
        return logits, law


@dataclass
class CandidateProposal:
    """A law over K candidates a position (DFlash2's sampled walk): q is zero off the candidates,
    and each position's q is the transition row of the candidate chosen before it."""

    q_draft: torch.Tensor  # [bs, S] q_i(d_i)
    ids: torch.Tensor  # [bs, S, K] the candidates (distinct at a position)
    q: torch.Tensor  # [bs, S, K] their probabilities on the walked path

    def narrow(self, n_draft: int) -> CandidateProposal:
        return CandidateProposal(self.q_draft[:, :n_draft], self.ids[:, :n_draft], self.q[:, :n_draft])

    def every_row(self) -> CandidateProposal:
        return self  # its rows are scatters of q: no LM head

    def requests(self, part: slice) -> CandidateProposal:
        return CandidateProposal(self.q_draft[part], self.ids[part], self.q[part])

    def rows(self, position: torch.Tensor, vocab: int) -> torch.Tensor:
        """[bs, V]: q at one draft position per request, scattered over the vocabulary."""
        at = torch.arange(position.shape[0], device=position.device), position
        dense = torch.zeros((position.shape[0], vocab), dtype=torch.float32, device=position.device)
        return dense.scatter_(1, self.ids[at], self.q[at].float())


def draw_drafts(
    features: torch.Tensor,
    logits_of: Callable[[torch.Tensor], torch.Tensor],
    sampling_info,
    vocab: int,
    reqs=None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, DraftProposal]:
    """The drafts [bs, S] sampled from each request's law over the drafter's logits, and q.

    features: [bs, S, H] at the draft positions; logits_of: [n, H] -> [n, V] (the target's LM
    head, gathered over TP ranks); sampling_info: SGLang's SamplingBatchInfo.
    """
    bs, size, _ = features.shape
    rows = bs * size
    flat = features.flatten(0, 1)

    def per_row(values: torch.Tensor) -> torch.Tensor:
        return values.reshape(-1).repeat_interleave(size)  # request -> its S draft rows

    temperature = per_row(sampling_info.temperatures.float())
    top_k = per_row(sampling_info.top_ks.to(torch.int64))
    top_p = per_row(sampling_info.top_ps.float())
    min_p = per_row(sampling_info.min_ps.float())
    plan = plan_for(sampling_info, vocab, reqs)
    drafts = torch.empty(rows, dtype=torch.int64, device=features.device)
    q_draft = torch.empty(rows, dtype=torch.float32, device=features.device)
    cut, log_norm = torch.empty_like(q_draft), torch.empty_like(q_draft)
    step = chunk_rows(vocab)
    for start in range(0, rows, step):
        part = slice(start, min(start + step, rows))
        scaled = logits_of(flat[part]).float() / temperature[part].unsqueeze(-1)
        cut[part] = row_cut(scaled, top_k[part], top_p[part], min_p[part], plan)
        kept = torch.where(scaled >= cut[part].unsqueeze(-1), scaled, float("-inf"))
        del scaled
        log_norm[part] = torch.logsumexp(kept, dim=-1)
        # Gumbel-max: argmax(log q + G) is a draw from q; G = -log(E), E ~ Exp(1).
        noise = torch.empty_like(kept).exponential_(generator=generator).log_().neg_()
        choice = (kept + noise).argmax(dim=-1)
        del noise
        drafts[part] = choice
        q_draft[part] = (kept.gather(-1, choice.unsqueeze(-1)).squeeze(-1) - log_norm[part]).exp()
    law = RowLaw(temperature, cut, log_norm)
    return drafts.view(bs, size), DraftProposal(q_draft.view(bs, size), features, law, logits_of)
