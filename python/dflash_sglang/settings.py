"""DFlashSettings: every startup decision of a DFLASH worker, resolved once, with the reason for
each one that is off.

The worker's constructor asks `DFlashSettings.resolve` once, from SGLang's server args, the target
worker, our drafter and the worker's kind (its loop: the overlap worker wants the drafter stream),
then wires its phases from the value. The switches are read here, through environment.py, and
nowhere later in the step. A reason is `str | None`: None means "not off"; the text says why it is
off, for the startup line and for errors. What cannot be served fails here, naming the options.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sglang.srt.runtime_context import get_parallel, get_spec

from .errors import DFlashConfigError
from .runtime import host_sync
from .runtime.streams import drafter_stream_off_because
from .sampling.sampled_drafts import drafts_at_temperature
from .sampling.simulated_acceptance import SimulatedAcceptance
from .step.deferred_context import deferral_off_because
from .step.draft_window import refuse_unsupported_setups as refuse_what_the_ring_cannot_serve
from .step.ragged import ragged_off_because
from .tree import verify as tree_verify
from .tree.switches import TreeSettings, tree_settings
from .width.controller import adaptive_default_off_because
from .width.request_lengths import partial_drafter_requested

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DFlashSettings:
    worker: str  # who serves: "dflash_sglang.overlap.DFlashOverlapWorker"
    schedule: str  # SGLang's loop that runs it: "synchronous" or "overlap"
    block_size: int  # B, the drafter's block (a chain verifies up to B, a tree N nodes from it)
    tree: TreeSettings | None  # --speculative-eagle-topk K > 1 (tree/switches.py); None: a chain
    draft_vocab: tree_verify.DraftVocab | None  # a tree's: the drafter's log q over the LM head
    window_size: int | None  # --speculative-draft-window-size W (step/draft_window.py)
    drafter_stream_off_because: str | None  # None: the drafter's work on its own CUDA stream
    simulated: SimulatedAcceptance | None  # benchmarking only: acceptance drawn, not verified
    sampled_drafts: bool  # drafts sampled from the drafter's law at T > 0 (sampling/sampled_drafts.py)
    block_verification: bool  # sampled drafts verified as a block (sampling/block_verify.py)
    drafts_are: str  # the startup line's words for drafts at T > 0, and why
    adaptive_default_off_because: str | None  # None: the adaptive width is on unless asked off
    ragged_off_because: str | None  # None: a step can verify each request's own length
    partial_drafter: bool  # a ragged step drafts only the requests that verify drafts
    eager_context_because: str | None  # None: plain steps' context held until the drafter reads it
    check_host_sync: bool  # DFLASH_SGLANG_CHECK_HOST_SYNC: no step reads device data on the host
    enable_metrics: bool  # SGLang's --enable-metrics: the width signal's gauges
    tp_rank: int  # this rank in SGLang's TP group
    draft_layers: int
    target_layer_ids: tuple[int, ...]  # the target layers whose features the drafter reads

    @property
    def drafter_stream(self) -> bool:
        return self.drafter_stream_off_because is None

    @property
    def defers_context(self) -> bool:
        return self.eager_context_because is None

    @property
    def tree_nodes(self) -> int | None:
        """A tree's N nodes a step verifies at most (None for a chain: the block)."""
        return None if self.tree is None else self.tree.width

    @classmethod
    def resolve(cls, worker_class, server_args, target_worker, draft_model) -> DFlashSettings:
        """The decisions, their refusals raised in the order the worker raised them before (the
        width controller's own come after these: the worker builds it from them)."""
        model_runner, device = target_worker.model_runner, target_worker.device
        config = draft_model.config
        check_the_pair(config, model_runner)
        spec = get_spec()
        tree = tree_settings(server_args)  # a tree verifies N nodes from a block of B; a chain, B = N
        block_size = resolve_block_size(spec, tree, config)
        window_size = spec.speculative_draft_window_size  # SGLang checked W >= B
        if window_size is not None:
            refuse_what_the_ring_cannot_serve(server_args, window_size)
        stream_off = drafter_stream_off_because(worker_class.schedule, device)
        simulated = SimulatedAcceptance.for_worker(tree, block_size, device)
        if simulated is not None:
            logger.warning("dflash_sglang: %s: simulated acceptance, for benchmarking only; the "
                           "output is not the target's", simulated.describe)  # fmt: skip
        sampled, block_verification, drafts_are = drafts_at_temperature(
            draft_model, tree, simulated, spec.speculative_use_block_verification
        )
        ragged_off = ragged_off_because(model_runner, tree, simulated)
        partial = partial_drafter_requested(window_size)
        draft_vocab = prepare_trees(tree, block_size, server_args, model_runner, draft_model)
        return cls(
            worker=f"{worker_class.__module__}.{worker_class.__qualname__}",
            schedule=worker_class.schedule,
            block_size=block_size,
            tree=tree,
            draft_vocab=draft_vocab,
            window_size=window_size,
            drafter_stream_off_because=stream_off,
            simulated=simulated,
            sampled_drafts=sampled,
            block_verification=block_verification,
            drafts_are=drafts_are,
            adaptive_default_off_because=adaptive_default_off_because(model_runner),
            ragged_off_because=ragged_off,
            partial_drafter=partial,
            eager_context_because=deferral_off_because(server_args),
            check_host_sync=host_sync.enabled(),
            enable_metrics=bool(server_args.enable_metrics),
            tp_rank=getattr(get_parallel().tp_group, "rank_in_group", 0),
            draft_layers=config.num_hidden_layers,
            target_layer_ids=tuple(config.target_layer_ids),
        )

    def startup_line(self, verify_width: str) -> str:
        """The line a server logs once it is built; `verify_width` is the width controller's own
        words (width/controller.py decides from its switches)."""
        host_sync_check = ", host-sync check on" if self.check_host_sync else ""
        if self.tree is not None:
            verify_width = f"a tree of {self.tree.width} nodes, {verify_width}"
        context = "deferred" if self.defers_context else f"injected at once ({self.eager_context_because})"
        return (
            f"dflash_sglang: DFLASH served by {self.worker} ({self.schedule} schedule, drafter stream "
            f"{'on' if self.drafter_stream else 'off'}{host_sync_check}; block size {self.block_size}, "
            f"verify width {verify_width}, draft window {self.window_size or 'off'}, draft layers "
            f"{self.draft_layers}, target layers {list(self.target_layer_ids)}; drafts at T > 0: "
            f"{self.drafts_are}; plain steps' context {context})"
        )


def check_the_pair(config, model_runner) -> None:
    """The drafter fits the target, and reads the layers the target captures."""
    config.validate_against(model_runner.model_config.hf_config)
    captured = model_runner.spec_aux_config.dflash_target_layer_ids
    if captured is not None and tuple(captured) != config.target_layer_ids:
        raise DFlashConfigError(
            f"dflash_config.target_layer_ids = {list(config.target_layer_ids)} but the target "
            f"captures layers {list(captured)}"
        )


def resolve_block_size(spec, tree: TreeSettings | None, config) -> int:
    """B: a tree's --speculative-dflash-block-size (N is its width), a chain's
    --speculative-num-draft-tokens, else the drafter's config."""
    block = spec.speculative_dflash_block_size if tree else spec.speculative_num_draft_tokens
    block_size = int(block or config.block_size)
    if block_size < 2:
        raise DFlashConfigError(f"--speculative-num-draft-tokens = {block_size}: need >= 2")
    return block_size


def prepare_trees(tree: TreeSettings | None, block_size: int, server_args, model_runner, draft_model):
    """A tree server: refuse what trees do not serve yet; the drafter's vocabulary (tree/verify.py).
    A chain: None."""
    if tree is None:
        return None
    # DFlash2 and Domino draft one path of their own.
    one_path = draft_model.candidate_selector is not None or draft_model.prefix_gru is not None
    return tree_verify.prepare(tree, block_size, server_args, model_runner, one_path)
