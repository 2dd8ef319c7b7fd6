"""Verifying, the second phase of a DFlash decode step (worker.py runs the step).

One target forward (TARGET_VERIFY) over the block the draft phase built, capturing the configured
layers' hidden states for the commit; the verify logits adjusted as no-spec would sample them
(penalties, grammar: sampling/verify_logits.py); then the block's acceptance rule. The rules are
chosen once, at startup, one per kind of block:

    a chain   greedy (the argmax prefix), or speculative sampling at T > 0 against point drafts or
              drafts sampled from q, token by token or as one block (sampling/sampled_verify.py);
              simulated acceptance instead when a benchmark asks for it (width/)
    a tree    the walk over the target's draws at every node (tree/verify.py), the accepted path
              moved to the front of the block's KV
    no draft  a plain step (the plan's width 1): SGLang's own sampler draws the token, as on a
              no-spec server (sampling/plain_draw.py); no speculative verify math runs, and where
              it can stand in the forward is SGLang's decode step (step/plain_forward.py)

Every TP rank commits rank 0's decision (step/tp_agreement.py). The phase returns a `Verified`,
which the commit phase takes whole and the width policy learns from (a tree's walk).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput

from ..runtime import dp_attention
from ..runtime.block import Block
from ..runtime.spec_info import host_read_bound
from ..sampling.accept import Acceptance, greedy_accept
from ..sampling.penalties import PenaltyLedger
from ..sampling.plain_draw import plain_draw
from ..sampling.sampled_verify import sampled_accept
from ..sampling.target_law import draw_every_row, is_greedy
from ..sampling.verify_logits import adjust_verify_logits, grammar_tree
from ..tree import verify as tree_verify
from . import ragged
from .plain_forward import decode_forward, decode_off_because
from .tp_agreement import TpAgreement


@dataclass
class Verified:
    target_out: object  # SGLang's GenerationBatchResult of the target forward
    accepted: Acceptance
    path_rows: torch.Tensor | None = None  # a tree's walk: the accepted node at each depth, [bs, depth]


class ChainRule:
    """A chain block's acceptance: greedy, or speculative sampling (point or sampled drafts)."""

    def __init__(self, tp: TpAgreement, block_verification: bool):
        self.tp, self.block_verification = tp, block_verification

    def __call__(self, batch, block: Block, logits: torch.Tensor, target_out, rows=None) -> Verified:
        """rows: per-request lengths (step/ragged.py), each request judged within its own."""
        info, size = batch.sampling_info, block.tokens.shape[1]
        greedy = is_greedy(info)
        drafts = block.tokens[:, 1:]
        if greedy:
            capped = drafts if rows is None else ragged.cap_drafts(drafts, rows.lengths)
            accepted = greedy_accept(capped, logits.argmax(-1).view(-1, size))
        else:  # point drafts (q one-hot), or drafts sampled from the block's proposal q
            accepted = sampled_accept(
                drafts, logits, info, size, reqs=batch.reqs, proposal=block.proposal,
                block_verification=self.block_verification,
                draft_counts=None if rows is None else rows.lengths - 1,
            )  # fmt: skip
        return Verified(target_out, self.tp.accepted(accepted, greedy=greedy))


class PlainRule:
    """A step that verifies no draft: each request's token from SGLang's own sampler."""

    def __init__(self, tp: TpAgreement, model_runner):
        self.tp, self.sampler = tp, model_runner.sampler

    def __call__(self, batch, block: Block, logits: torch.Tensor, target_out, rows=None) -> Verified:
        """rows: always None (a plain step's lengths are all 1: one width)."""
        info = batch.sampling_info
        accepted = plain_draw(self.sampler, logits, info, block.positions)
        return Verified(target_out, self.tp.accepted(accepted, greedy=is_greedy(info)))


class SimulatedRule:
    """Benchmarking only: acceptance drawn at set rates (sampling/simulated_acceptance.py)."""

    def __init__(self, tp: TpAgreement, simulated):
        self.tp, self.simulated = tp, simulated

    def __call__(self, batch, block: Block, logits: torch.Tensor, target_out, rows=None) -> Verified:
        """rows: always None (simulated acceptance verifies one width a batch: ragged_off_because)."""
        accepted = self.simulated.accept(block.tokens, logits.argmax(-1).view(-1, block.tokens.shape[1]))
        info = batch.sampling_info
        return Verified(target_out, self.tp.accepted(accepted, greedy=is_greedy(info)))


class TreeRule:
    """A tree block's acceptance: the walk, the accepted path moved to the front."""

    def __init__(self, tp: TpAgreement, model_runner):
        self.tp, self.model_runner = tp, model_runner  # its KV pool comes later

    def __call__(self, batch, block: Block, logits: torch.Tensor, target_out, rows=None) -> Verified:
        """rows: per-request lengths (step/ragged.py), each request walking its first L_i nodes."""
        info, size = batch.sampling_info, block.tokens.shape[1]
        greedy = is_greedy(info)
        predictions = self.tp.predictions(draw_every_row(logits, info, size, batch.reqs), greedy)
        lengths = None if rows is None else rows.lengths
        accepted, front = tree_verify.accept(block.tree, predictions, lengths)
        kv_pool = self.model_runner.token_to_kv_pool
        tree_verify.move_path_to_front(front, block.cache_loc, kv_pool, target_out.logits_output)
        # front[:, d]: the accepted node at depth d (what each smaller budget would have taken:
        # the width policy's VerifyWidth.step_done)
        return Verified(target_out, accepted, front)


class Verifying:
    """The verify phase: the target forward over a block, then its acceptance rule."""

    def __init__(self, target_worker, stream, tree, chain_rule, tree_rule: TreeRule | None, plain_rule=None,
                 record=None):  # fmt: skip
        self.target_worker, self.tree = target_worker, tree
        self.stream = stream  # the drafter's (runtime/streams.py): the drafts must be there
        self.chain_rule, self.tree_rule = chain_rule, tree_rule
        self.plain_rule = plain_rule or chain_rule  # a step of width 1
        self.record = record  # step/step_record.py's, where a test asks for one
        # A plain step's forward as SGLang's decode step, where it can stand in (step/plain_forward.py):
        # decided once the target's graphs exist (`bind_plain_forward`).
        self.plain_decodes = False

    def __call__(
        self, batch, block: Block, penalties: PenaltyLedger | None, grammar_barrier=None
    ) -> Verified:
        self.stream.join()  # the drafts
        grammar = grammar_tree(batch, block.tokens, block.tree)  # host copy of the drafts, during the verify
        lengths = block.plan.lengths  # per-request lengths, or None: the whole block for all
        if lengths is None:
            forward = self.plain_forward if self.decodes(block) else self.target_forward
            target_out = forward(batch, block)
            rows = None
        else:
            rows = ragged.ragged_rows(lengths, block.tokens.shape[1], block.tokens.device)
            target_out = self.ragged_forward(batch, block, rows)
        logits = target_out.logits_output.next_token_logits
        if penalties is not None:
            penalties.catch_up(batch.reqs)  # a PD decode server's requests start here
        adjust_verify_logits(logits, batch, block.tokens, penalties, grammar, grammar_barrier, block.tree)
        return self.rule(block)(batch, block, logits, target_out, rows)

    def rule(self, block: Block):
        """The block's acceptance rule: a tree's walk, a plain step's draw, or the chain's."""
        if block.tree is not None:
            return self.tree_rule
        return self.plain_rule if block.plan.width == 1 else self.chain_rule

    def bind_plain_forward(self, tree, dp_attention: bool) -> str | None:
        """Once the target's graphs are captured: whether a plain step runs SGLang's decode step;
        why not, where it cannot stand in."""
        why = decode_off_because(self.target_worker.model_runner, tree, dp_attention)
        self.plain_decodes = why is None
        return why

    def decodes(self, block: Block) -> bool:
        """Whether this block's forward is SGLang's decode step: a plain step, where it can stand in."""
        return self.plain_decodes and block.plan.width == 1  # (never on a tree server: decode_off_because)

    def plain_forward(self, batch, block: Block):
        """A plain step's one token a request through a DECODE forward (step/plain_forward.py)."""
        if self.record is not None:
            self.record.one_token_each(len(batch.seq_lens))
        return decode_forward(self.target_worker, batch, block)

    def ragged_forward(self, batch, block: Block, rows):
        """The verify forward over each request's first L_i positions; its outputs in the block's
        rows (step/ragged.py)."""
        kept = ragged.ragged_block(block, rows, batch, self.target_worker.model_runner.kv_index_translator)
        target_out = self.target_forward(batch, kept, rows)
        out = target_out.logits_output
        out.next_token_logits = ragged.scatter_back(out.next_token_logits, rows)
        out.hidden_states = ragged.scatter_back(out.hidden_states, rows)
        return target_out

    def target_forward(self, batch, block: Block, rows=None):
        """One TARGET_VERIFY forward over the block (or the tree's nodes), hidden states captured;
        with per-request `rows`, over their flat tokens (ragged_forward)."""
        layout = None if rows is None else ragged.layout(rows, block.tokens.device)
        size = block.tokens.shape[1] if layout is None else max(layout.verify_lens_cpu)
        verify_input = DFlashVerifyInput(
            draft_token=block.tokens.flatten(),
            positions=block.positions,
            draft_token_num=size,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            kv_loc_plan=block.kv_plan,
        )
        verify_input.ragged_verify_layout = layout
        batch.out_cache_loc = block.cache_loc
        # The verify reads the committed prefix plus the block; restore the host lengths after.
        committed_cpu, committed_sum = batch.seq_lens_cpu, batch.seq_lens_sum
        batch.seq_lens_cpu = host_read_bound(batch, batch.spec_info, size)
        batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
        if block.tree is not None:  # nodes at seq_len + depth, each seeing its ancestors
            tree_verify.attach(verify_input, block.tree, batch.seq_lens, batch.seq_lens_sum, rows)
        elif self.tree is not None:  # a tree server's plain step
            tree_verify.attach_chain_links(verify_input, len(batch.seq_lens), size, block.tokens.device)
        dp = dp_attention.enabled()  # attention metadata is planned after the DP padding
        forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker, defer_metadata_init=dp)
        batch.seq_lens_cpu, batch.seq_lens_sum = committed_cpu, committed_sum
        if dp:
            dp_attention.run_eager_if_peers_differ(forward_batch, batch)
        # Graphs: the widest uniform chain's only.
        if not block.plan.widest or block.tree is not None or layout is not None:
            forward_batch.can_run_decode_cuda_graph = False
        if self.record is not None:  # what the target is handed, as it is handed
            self.record.target_forward(verify_input, len(batch.seq_lens))
        return self.target_worker.forward_batch_generation(
            batch=None,
            forward_batch=forward_batch,
            is_verify=True,
            skip_attn_backend_init=None if dp else True,  # planned above, unless deferred
        )
