"""Every TP rank commits the same tokens: rank 0's decisions, broadcast as SGLang's own DFLASH
worker does (`SpecTpSync`, default `SGLANG_SPEC_TP_SYNC=all`).

Under tensor parallelism each rank runs the whole step on the same replicated inputs (gathered
verify logits, all-reduced hidden states), so greedy decisions already agree up to the bits of the
collectives, and rejection sampling draws from generators seeded alike. Neither is guaranteed
(a rank's RNG can advance differently, a collective can round differently): a rank that commits
another token than its peers desynchronises every later collective, so rank 0 decides. The sites
are SGLang's (`DFLASH_ACCEPT_GREEDY`, `DFLASH_ACCEPT_SAMPLE`, `DFLASH_TARGET`), so
`SGLANG_SPEC_TP_SYNC` selects them for both workers alike. At TP=1 nothing is sent.

The drafter is built under SGLang's draft TP scope (`draft_scope`): with plain TP the draft
shares the target's group; under attention DP or CP SGLang narrows it (CP is refused for now,
sglang_draft.refuse_unsupported_parallelism).
"""

from __future__ import annotations

import contextlib

import torch
from sglang.srt.layers.dp_attention import get_dp_tp_group
from sglang.srt.speculative.draft_parallel import model_draft_parallel_spec, resolve_draft_parallel_layout
from sglang.srt.speculative.spec_tp_sync import SpecTpSync, SpecTpSyncSite
from sglang.srt.speculative.spec_utils import draft_pp_context, draft_tp_context

from ..sampling.accept import Acceptance


@contextlib.contextmanager
def draft_scope(model_runner):
    """The scope SGLang builds (and runs) a DFLASH drafter in: its resolved draft TP layout."""
    layout = resolve_draft_parallel_layout(
        model_draft_parallel_spec(
            model_runner.spec_aux_config.draft_model_config, spec_algorithm=model_runner.spec_algorithm
        ),
        collapse_cp=True,
    )
    with draft_pp_context(), draft_tp_context(layout):
        yield


class TpAgreement:
    def __init__(self, tp_group=None):
        # The ranks that run one batch: the whole TP group, or the attention-TP group under DP.
        self.sync = SpecTpSync(tp_group or get_dp_tp_group())

    def accepted(self, accepted: Acceptance, greedy: bool) -> Acceptance:
        """Rank 0's acceptance (lengths and tokens) on every rank."""
        site = SpecTpSyncSite.DFLASH_ACCEPT_GREEDY if greedy else SpecTpSyncSite.DFLASH_ACCEPT_SAMPLE
        if not self.sync.enabled(site):
            return accepted
        return Acceptance(self.sync.sync(site, accepted.lengths), self.sync.sync(site, accepted.tokens))

    def predictions(self, target_tokens: torch.Tensor, greedy: bool) -> torch.Tensor:
        """Rank 0's target token at every tree node: the walk, and so the path moved, agree."""
        site = SpecTpSyncSite.DFLASH_ACCEPT_GREEDY if greedy else SpecTpSyncSite.DFLASH_ACCEPT_SAMPLE
        return self.sync.sync(site, target_tokens) if self.sync.enabled(site) else target_tokens

    def sampled_drafts(self, drafts: torch.Tensor) -> torch.Tensor:
        """Rank 0's sampled drafts on every rank (SGLang's site for its selector's draws): the
        verify forward must read one block on every rank, and rank 0's q is the law they were drawn
        from (the other ranks' acceptance is rank 0's, above)."""
        return self.sync.sync(SpecTpSyncSite.DFLASH_SELECTOR, drafts.contiguous())

    def first_tokens(self, next_token_ids: torch.Tensor) -> torch.Tensor:
        """Rank 0's prefill tokens (sampled by the target's sampler) on every rank."""
        return self.sync.sync(SpecTpSyncSite.DFLASH_TARGET, next_token_ids)
