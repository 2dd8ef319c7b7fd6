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
from sglang.srt.runtime_context import get_parallel, get_spec
from sglang.srt.speculative.base_spec_worker import BaseSpecWorker
from sglang.srt.speculative.draft_worker_common import (
    build_draft_tp_worker,
)
from sglang.srt.utils import async_h2d

from .drafter.sglang_model import require_our_drafter
from .errors import DFlashConfigError
from .runtime import dp_attention, host_sync
from .runtime.spec_info import DFlashDraftState
from .runtime.streams import DrafterStream
from .sampling.penalties import PenaltyLedger, PenaltyParams
from .sampling.prewarm import prewarm_sampled_verify
from .sampling.sampled_drafts import drafts_at_temperature
from .sampling.simulated_acceptance import SimulatedAcceptance
from .step.committing import Committing
from .step.deferred_context import DeferredContext, deferral_off_because
from .step.draft_window import allocate_window_pool, refuse_unsupported_setups
from .step.drafting import Drafting
from .step.hybrid import RecurrentStateCommit
from .step.ragged import ragged_off_because
from .step.step_record import step_record
from .step.tp_agreement import TpAgreement, draft_scope
from .step.verifying import ChainRule, SimulatedRule, TreeRule, Verifying
from .tree import verify as tree_verify
from .tree.switches import tree_settings
from .width.controller import VerifyWidth, adaptive_default_off_because
from .width.request_lengths import partial_drafter_requested

logger = logging.getLogger(__name__)


class DFlashWorker(BaseSpecWorker):
    schedule = "synchronous"  # which SGLang loop runs it; the overlap variant overrides

    def __init__(self, server_args, gpu_id: int, nccl_port: int, target_worker):
        super().__init__()
        self.server_args = server_args
        self._target_worker = target_worker
        self.model_runner = target_worker.model_runner
        self.device = target_worker.device
        self.tp = TpAgreement()  # every TP rank commits rank 0's tokens (step/tp_agreement.py)
        with draft_scope(self.model_runner):  # sharded like the target, as SGLang builds drafters
            bundle = build_draft_tp_worker(
                server_args=server_args,
                gpu_id=gpu_id,
                nccl_port=nccl_port,
                target_model_config=self.model_runner.model_config,
                algo_label="DFLASH",
            )
        self._draft_worker = bundle.draft_worker
        self.draft_runner = bundle.draft_model_runner
        self.draft_model = require_our_drafter(bundle.draft_model)  # or the architecture, named
        config = self.draft_model.config
        config.validate_against(self.model_runner.model_config.hf_config)
        captured = self.model_runner.spec_aux_config.dflash_target_layer_ids
        if captured is not None and tuple(captured) != config.target_layer_ids:
            raise DFlashConfigError(
                f"dflash_config.target_layer_ids = {list(config.target_layer_ids)} but the target "
                f"captures layers {list(captured)}"
            )
        # A tree verifies N nodes from a drafter block of B (tree/switches.py); a chain, B = N.
        self.tree = tree_settings(server_args)
        spec = get_spec()
        block = spec.speculative_dflash_block_size if self.tree else spec.speculative_num_draft_tokens
        self.block_size = int(block or config.block_size)
        if self.block_size < 2:
            raise DFlashConfigError(f"--speculative-num-draft-tokens = {self.block_size}: need >= 2")
        self.draft_model.set_block_size(self.block_size)
        # SGLang checked window >= block; the ring and its private pool come with the pools.
        self.window_size = get_spec().speculative_draft_window_size
        if self.window_size is not None:
            refuse_unsupported_setups(server_args, self.window_size)
        self.drafter_stream = DrafterStream(self.device, enabled=self.wants_drafter_stream(server_args))
        self.simulated = SimulatedAcceptance.for_worker(self.tree, self.block_size, self.device)
        self.sampled_drafts, self.block_verification, drafts_are = drafts_at_temperature(
            self.draft_model, self.tree, self.simulated, spec.speculative_use_block_verification,
        )  # fmt: skip
        # How much of each block (or how many tree nodes) a step verifies (width/controller.py),
        # for the whole batch or request by request (step/ragged.py).
        tree_nodes = self.tree.width if self.tree else None
        off_because = adaptive_default_off_because(self.model_runner)
        tp_group = get_parallel().tp_group
        self.widths = VerifyWidth(
            self.block_size, self.device, tp_group, tree_nodes, off_because,
            metrics=bool(server_args.enable_metrics), tp_rank=getattr(tp_group, "rank_in_group", 0),
            ragged_off_because=ragged_off_because(self.model_runner, self.tree, self.simulated),
            partial_drafter=partial_drafter_requested(self.window_size),
        )  # fmt: skip
        draft_vocab = None  # a tree's: the drafter's log q
        if self.tree is not None:  # refuses what trees do not serve yet
            model = self.draft_model  # DFlash2 and Domino draft one path
            one_path = model.candidate_selector is not None or model.prefix_gru is not None
            draft_vocab = tree_verify.prepare(
                self.tree, self.block_size, server_args, self.model_runner, one_path
            )
        # The draft KV's injection, held over plain steps until the drafter reads it.
        eager_because = deferral_off_because(server_args)
        deferred = eager_because is None
        self.context = DeferredContext(
            self.draft_model, self.draft_runner, self.drafter_stream, deferred, self.block_size
        )
        # The step's three phases (step/drafting.py, step/verifying.py, step/committing.py).
        self.draft = Drafting(
            self.model_runner, self.draft_runner, self.draft_model, self.drafter_stream, self.tp,
            self.block_size, self.device, self.context, self.tree, draft_vocab, self.sampled_drafts,
            partial=self.widths.partial_drafter,
        )  # fmt: skip
        self.verify = self.verify_phase()
        self.commit = Committing(self.context)
        # Testing: what each step handed the target (DFLASH_SGLANG_STEP_RECORD), else None.
        self.step_record = self.verify.record = step_record(
            self.widths, getattr(tp_group, "rank_in_group", 0)
        )
        if self.simulated is not None:
            logger.warning("dflash_sglang: %s: simulated acceptance, for benchmarking only; the "
                           "output is not the target's", self.simulated.describe)  # fmt: skip
        self.penalties: PenaltyLedger | None = None  # allocated by the first penalised request
        self.check_host_sync = host_sync.enabled()
        logger.info(
            "dflash_sglang: DFLASH served by %s.%s (%s schedule, drafter stream %s%s; block size %d, "
            "verify width %s, draft window %s, draft layers %d, target layers %s; drafts at T > 0: %s; "
            "plain steps' context %s)",
            type(self).__module__,
            type(self).__qualname__,
            self.schedule,
            "on" if self.drafter_stream.active else "off",
            ", host-sync check on" if self.check_host_sync else "",
            self.block_size,
            self.widths.describe
            if self.tree is None
            else f"a tree of {self.tree.width} nodes, {self.widths.describe}",
            self.window_size or "off",
            config.num_hidden_layers,
            list(config.target_layer_ids),
            drafts_are,
            "deferred" if deferred else f"injected at once ({eager_because})",
        )

    def wants_drafter_stream(self, server_args) -> bool:
        return False

    def verify_phase(self) -> Verifying:
        """The verify phase, its acceptance rules chosen here, once (step/verifying.py)."""
        if self.simulated is not None:  # benchmarking only
            chain = SimulatedRule(self.tp, self.simulated)
        else:
            chain = ChainRule(self.tp, self.block_verification)
        trees = None if self.tree is None else TreeRule(self.tp, self.widths, self.model_runner)
        return Verifying(self.target_worker, self.drafter_stream, self.widths, self.tree, chain, trees)

    # ---- SGLang's worker interface -----------------------------------------------------------

    @property
    def target_worker(self):
        """SGLang's TpModelWorker of the target (as BaseSpecWorker's property reads it)."""
        return self._target_worker

    @property
    def draft_worker(self):
        return self._draft_worker

    @property
    def spec_v2_attn_backends(self) -> tuple:
        return (self.model_runner.attn_backend, self.draft_runner.attn_backend)

    def alloc_memory_pool(
        self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None
    ):
        if self.window_size is None:
            # The draft pool shares the target's slot ids and request table: a slot holds the
            # target's KV in the target pool and the injected context KV in the draft pool.
            self._draft_worker.alloc_memory_pool(
                memory_pool_config=memory_pool_config,
                req_to_token_pool=req_to_token_pool,
                token_to_kv_pool_allocator=token_to_kv_pool_allocator,
            )
            return
        window = self.draft.window = allocate_window_pool(
            self._draft_worker, memory_pool_config, req_to_token_pool, token_to_kv_pool_allocator,
            self.window_size, self.block_size, self.device,
        )  # fmt: skip
        logger.info(
            "dflash_sglang: draft window %d: draft KV pool of %d slots (%d requests x %d), target pool %d",
            self.window_size, self.draft_runner.token_to_kv_pool.size, window.max_requests,
            window.ring, self.model_runner.token_to_kv_pool.size,
        )  # fmt: skip

    def init_attention_backends(self):
        self._draft_worker.init_attention_backends()
        # After the target's backends exist: hybrid targets commit their recurrent state.
        self.commit.recurrent_state = RecurrentStateCommit(
            self.target_worker, self.widths.widest, self.tree is not None
        )

    def init_cuda_graphs(self):
        # The draft runs eager for now (no decode graph); the target's verify graphs are SGLang's.
        self._draft_worker.init_cuda_graphs(capture_decode_cuda_graph=False)

    def prewarm_sampling(self):
        # SGLang sizes the KV pool after this: rehearse our sampled verify's worst-case memory.
        return prewarm_sampled_verify(self.model_runner, self.widths.widest, draws=self.sampled_drafts)

    def weight_update_runners(self):
        # The drafter takes only its own tensors from an update (sglang_draft.load_weights): a
        # target checkpoint leaves it as it is, like a fresh server on the new target would.
        return [("draft", self.draft_runner)]

    def __getattr__(self, name):
        # Everything else (memory info, weight updates, ...) is the target worker's.
        if name == "_target_worker":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self._target_worker, name)

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
            width = self.widths.choose(batch)  # and each request's length, where they differ
            block = self.draft(batch, batch.spec_info, width, self.widths.per_request_lengths)
            verified = self.verify(batch, block, penalties, grammar_barrier)
            result = self.commit(batch, block, verified, penalties, on_publish)
            if self.step_record is not None:
                self.step_record.step(batch, width, result.accept_lens)
            self.widths.step_done()
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
