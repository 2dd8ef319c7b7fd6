"""DFlashWorker: SGLang's speculative worker for `--speculative-algorithm DFLASH`.

One decode step, in three phases (`forward_batch_generation`):

    draft   block = [last verified token, mask x (B-1)] at positions seq_len .. seq_len+B-1,
            embedded with the target's embedding; one drafter forward (TARGET_VERIFY mode,
            non-causal over the injected context); the target's LM head -> B-1 draft tokens,
            or a tree of N nodes (step/drafting.py, tree/verify.py)
    verify  one target TARGET_VERIFY forward over the block, capturing the configured layers'
            hidden states; acceptance (greedy, or lossless rejection sampling; a tree's walk)
    commit  publish the new lengths (`on_publish`), inject the committed positions' target
            features into the draft KV pool, hand the bonus token to the next step

Prefill runs the target with hidden-state capture and injects the prompt's features. KV slots
come from SGLang's spec-v2 over-allocation (`DFlashDraftInputV2.prepare_for_decode`): the block's
slots are reserved ahead, rejected ones are simply overwritten next step.

No phase reads device data on the host, so SGLang's overlap scheduler can plan step t+1 while step
t runs. `DFlashWorker` runs under SGLang's synchronous loop; `DFlashOverlapWorker` (overlap.py) under
the overlap loop, with the drafter-side work on its own CUDA stream (runtime/streams.py, docs/overlap.md).
"""

from __future__ import annotations

import contextlib
import logging

import torch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    compute_position,
)
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
from sglang.srt.speculative.draft_worker_common import (
    build_draft_tp_worker,
)
from sglang.srt.utils import async_h2d

from .drafter.sglang_model import require_our_drafter
from .runtime import dp_attention, host_sync
from .runtime.spec_info import DFlashDraftState
from .runtime.streams import DrafterStream
from .sampling.penalties import PenaltyLedger, PenaltyParams
from .sampling.prewarm import prewarm_sampled_verify
from .settings import DFlashSettings
from .step.committing import Committing
from .step.deferred_context import DeferredContext
from .step.draft_window import draft_window
from .step.drafting import Drafting
from .step.hybrid import RecurrentStateCommit
from .step.step_record import step_record
from .step.tp_agreement import TpAgreement, draft_scope
from .step.verifying import ChainRule, PlainRule, SimulatedRule, TreeRule, Verifying
from .width.controller import VerifyWidth

logger = logging.getLogger(__name__)


def build_drafter(server_args, gpu_id: int, nccl_port: int, model_runner):
    """SGLang's draft TpModelWorker and runner for our drafter, sharded like the target (as SGLang
    builds drafters)."""
    with draft_scope(model_runner):
        return build_draft_tp_worker(
            server_args=server_args,
            gpu_id=gpu_id,
            nccl_port=nccl_port,
            target_model_config=model_runner.model_config,
            algo_label="DFLASH",
        )


class DFlashWorker(BaseSpecWorker):
    schedule = "synchronous"  # which SGLang loop runs it; the overlap variant overrides

    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker):
        super().__init__()
        self.server_args, self._target_worker, self.device = server_args, target_worker, target_worker.device
        self.tp = TpAgreement()  # every TP rank commits rank 0's tokens (step/tp_agreement.py)
        bundle = build_drafter(server_args, gpu_id, nccl_port, self.model_runner)
        self._draft_worker, self.draft_runner = bundle.draft_worker, bundle.draft_model_runner
        self.draft_model = require_our_drafter(bundle.draft_model)  # or the architecture, named
        # Every startup decision, once, and why where something is off (settings.py).
        settings = DFlashSettings.resolve(type(self), server_args, target_worker, self.draft_model)
        self.settings, self.block_size, self.tree = settings, settings.block_size, settings.tree
        self.simulated, self.block_verification = settings.simulated, settings.block_verification
        self.check_host_sync = settings.check_host_sync  # the step's guard
        self.draft_model.set_block_size(self.block_size)
        self.drafter_stream = DrafterStream(self.device, enabled=settings.drafter_stream)
        # How much of each block (or how many tree nodes) a step verifies (width/controller.py),
        # for the whole batch or request by request (step/ragged.py).
        self.widths = VerifyWidth(
            self.block_size, self.device, get_parallel().tp_group, settings.tree_nodes,
            settings.adaptive_default_off_because, metrics=settings.enable_metrics, tp_rank=settings.tp_rank,
            ragged_off_because=settings.ragged_off_because, partial_drafter=settings.partial_drafter,
        )  # fmt: skip
        # The draft KV's injection, held over plain steps until the drafter reads it.
        held = (settings.defers_context, self.block_size, self.device)  # on, and how many steps at most
        self.context = DeferredContext(self.draft_model, self.draft_runner, self.drafter_stream, *held)
        # The step's three phases (step/drafting.py, step/verifying.py, step/committing.py).
        window = draft_window(settings.window_size, self.block_size, self.device)  # pool: alloc_memory_pool
        self.draft = Drafting(
            self.model_runner, self.draft_runner, self.draft_model, self.drafter_stream, self.tp,
            self.block_size, self.device, self.context, self.tree, settings.draft_vocab,
            settings.sampled_drafts, window=window,
        )  # fmt: skip
        # Testing: what each step handed the target (DFLASH_SGLANG_STEP_RECORD), else None.
        self.step_record = step_record(self.widths, settings.tp_rank)
        self.verify = self.verify_phase()
        # A hybrid target's recurrent-state commit, bound with the backends (init_attention_backends).
        recurrent_state = RecurrentStateCommit(target_worker, self.widths.widest, self.tree is not None)
        self.commit = Committing(self.context, recurrent_state)
        self.penalties: PenaltyLedger | None = None  # allocated by the first penalised request
        logger.info(settings.startup_line(self.widths.describe))

    def verify_phase(self) -> Verifying:
        """The verify phase, its acceptance rules chosen here, once (step/verifying.py)."""
        if self.simulated is not None:  # benchmarking only
            chain = SimulatedRule(self.tp, self.simulated)
        else:
            chain = ChainRule(self.tp, self.block_verification)
        trees = None if self.tree is None else TreeRule(self.tp, self.model_runner)
        plain = PlainRule(self.tp, self.model_runner)  # a step of width 1: SGLang's own sampler
        stream, record = self.drafter_stream, self.step_record
        return Verifying(self.target_worker, stream, self.tree, chain, trees, plain, record)

    # ---- SGLang's worker interface -----------------------------------------------------------
    # What SGLang reads on a spec worker, and nothing else: these, and BaseSpecWorker's own
    # (hicache_draft_plan, graph_memory_usage, last_shared_read_runner, clear_cache_pool, ...).
    # No forwarding: a name not defined here is an AttributeError, never the target worker's
    # (tests/test_worker_interface.py checks both against SGLang's scheduler).

    @property
    def target_worker(self):
        """SGLang's TpModelWorker of the target (as BaseSpecWorker's property reads it)."""
        return self._target_worker

    @property
    def model_runner(self):
        """The target's ModelRunner (SGLang's weight exporter reads it, as on the built-in)."""
        return self._target_worker.model_runner

    @property
    def draft_worker(self):
        return self._draft_worker

    @property
    def spec_v2_attn_backends(self) -> tuple:
        return (self.model_runner.attn_backend, self.draft_runner.attn_backend)

    def alloc_memory_pool(
        self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None
    ):
        window = self.draft.window  # the drafter's ring, with --speculative-draft-window-size
        if window is None:
            # The draft pool shares the target's slot ids and request table: a slot holds the
            # target's KV in the target pool and the injected context KV in the draft pool.
            self._draft_worker.alloc_memory_pool(
                memory_pool_config=memory_pool_config,
                req_to_token_pool=req_to_token_pool,
                token_to_kv_pool_allocator=token_to_kv_pool_allocator,
            )
            return
        window.allocate(self._draft_worker, memory_pool_config, req_to_token_pool, token_to_kv_pool_allocator)
        logger.info(
            "dflash_sglang: draft window %d: draft KV pool of %d slots (%d requests x %d), target pool %d",
            window.window, self.draft_runner.token_to_kv_pool.size, window.max_requests,
            window.ring, self.model_runner.token_to_kv_pool.size,
        )  # fmt: skip

    def init_attention_backends(self):
        self._draft_worker.init_attention_backends()
        self.commit.recurrent_state.bind()  # after the target's backends: a hybrid target's state

    def init_cuda_graphs(self):
        # The draft runs eager for now (no decode graph); the target's verify graphs are SGLang's,
        # captured before this call: whether a plain step can run SGLang's decode step is known now.
        self._draft_worker.init_cuda_graphs(capture_decode_cuda_graph=False)
        why = self.verify.bind_plain_forward(self.tree, dp_attention.enabled())
        logger.info("dflash_sglang: a plain step runs %s", why and f"the verify at width 1 ({why})" or
                    "SGLang's decode forward")  # fmt: skip

    def prewarm_sampling(self):
        # SGLang sizes the KV pool after this: rehearse our sampled verify's worst-case memory.
        return prewarm_sampled_verify(
            self.model_runner, self.widths.widest, draws=self.settings.sampled_drafts
        )

    def weight_update_runners(self):
        # The drafter takes only its own tensors from an update (sglang_draft.load_weights): a
        # target checkpoint leaves it as it is, like a fresh server on the new target would.
        return [("draft", self.draft_runner)]

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        # No target forward may overwrite what a queued injection of the last step still reads.
        self.drafter_stream.join()
        guard = host_sync.DeviceDataGuard(host_sync.step_inputs(batch)) if self.check_host_sync else None
        with guard or contextlib.nullcontext():
            if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
                return self.prefill(batch, on_publish)
            if batch.forward_mode.is_idle():
                return self.idle(batch, on_publish)
            penalties = self.penalty_ledger(batch)
            plan = self.widths.choose(batch)  # the width, and each request's length where they differ
            block = self.draft(batch, plan)  # the block carries the plan on to the verify
            verified = self.verify(batch, block, penalties, grammar_barrier)
            result = self.commit(batch, block, verified, penalties, on_publish)
            if self.step_record is not None:
                self.step_record.step(batch, plan, result.accept_lens)
            self.widths.step_done(plan, batch.reqs, verified)  # what the verify learned, the step's time
            return result

    # ---- prefill -----------------------------------------------------------------------------

    def prefill(self, batch, on_publish):
        result = self.target_worker.forward_batch_generation(
            batch, capture_hidden_mode=CaptureHiddenMode.FULL, return_kv_loc_plan=True
        )
        kv_plan, result.kv_loc_plan = result.kv_loc_plan, None
        result.new_seq_lens = batch.seq_lens
        if on_publish is not None:
            on_publish(result.new_seq_lens)
        if batch.forward_mode.is_idle():
            result.next_draft_input = DFlashDraftState.create_idle_input(device=self.device)
            return result
        result.next_token_ids = self.tp.first_tokens(result.next_token_ids)
        self.count_first_tokens(batch, result.next_token_ids)
        # Inject the prompt before returning: a radix-cache hit must never find target KV
        # without the matching draft KV.
        extend_lens = async_h2d(batch.extend_lens, dtype=torch.int32, device=self.device)
        prefix_lens = async_h2d(batch.prefix_lens, dtype=torch.int32, device=self.device)
        positions, _ = compute_position(
            self.model_runner.prefill_attention_backend_str, prefix_lens, extend_lens, sum(batch.extend_lens)
        )
        hidden = result.logits_output.hidden_states
        window = self.draft.window  # the drafter's ring, with --speculative-draft-window-size
        if window is None:
            write_ids = kv_plan.write_ids(self.draft_runner.kv_index_translator)
        else:
            window.begin_requests(batch)
            write_ids = window.prefill_slots(
                batch.req_pool_indices, batch.seq_lens, extend_lens, positions, sum(batch.extend_lens)
            )
        self.context.flush()  # what plain steps held first: a freed slot's new prompt wins
        with self.drafter_stream.run(hidden, positions, write_ids):
            self.draft_model.write_context_kv(
                self.draft_runner.token_to_kv_pool, hidden, positions, write_ids
            )
        result.logits_output.hidden_states = None
        result.next_draft_input = DFlashDraftState.create(result.next_token_ids, batch.seq_lens)
        return result

    def count_first_tokens(self, batch, first_tokens):
        """Penalties count generated tokens from each request's (re)prefill on (sampling/penalties.py)."""
        if self.penalty_ledger(batch) is not None:
            self.penalties.start(batch.req_pool_indices, first_tokens, batch.reqs)

    def penalty_ledger(self, batch) -> PenaltyLedger | None:
        """The penalties' counts, allocated by the first penalised request."""
        if self.penalties is None and PenaltyParams.of(batch.reqs, self.device) is not None:
            slots = self.model_runner.req_to_token_pool.req_to_token.shape[0]
            vocab = self.model_runner.model_config.vocab_size
            self.penalties = PenaltyLedger.allocate(slots, vocab, self.device)
        return self.penalties

    def idle(self, batch, on_publish):
        if dp_attention.enabled():  # the peers' verify collectives need this rank too
            dp_attention.run_idle_verify(batch, self.target_worker, self.block_size, self.device)
        empty = torch.empty((0,), dtype=torch.int64, device=self.device)
        state = DFlashDraftState.create(empty, empty)
        if on_publish is not None:
            on_publish(state.new_seq_lens)
        return GenerationBatchResult(
            next_token_ids=empty,
            accept_lens=empty.to(torch.int32),
            next_draft_input=state,
            speculative_num_draft_tokens=self.block_size,
            new_seq_lens=state.new_seq_lens,
        )
