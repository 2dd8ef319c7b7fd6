"""SGLang plugin entry point (group `sglang.srt.plugins`), loaded by SGLang in every process.

Through SGLang's HookRegistry it
- accepts the seed cards' option names for SGLang's own options (admission/cli_aliases.py),
- names the options to change when a hybrid target's cache strategy cannot speculate
  (admission/startup_checks.py),
- refuses prompt ids outside the vocabulary, empty prompts and bad sample counts `n` with a 400
  (admission/input_checks.py; SGLang's scheduler dies of the first two, the third is a 500),
- makes `--speculative-algorithm DFLASH` build this package's worker,
- lets `/set_internal_state` switch its verify policy (width/runtime_switch.py),
- builds the ReplaySSM pool SGLang refuses DFLASH on a Gated DeltaNet target, and declares its flag
  for `DFLASH_SGLANG_REPLAY_SSM=1` (admission/replay_ssm.py), and runs a draft tree's verify
  through it (tree/replay_ring.py),
- resolves `architectures: ["DFlashDraftModel"]` (and its aliases) to this package's draft model,
- installs the torch stand-ins for GPU-only kernels; each one acts only on CPU tensors and
  hands GPU tensors to SGLang's own kernel.

Which worker, as the seed cards toggle "schedule overlapping":
  SGLANG_ENABLE_SPEC_V2=1 or SGLANG_ENABLE_DFLASH_SPEC_V2=1
                                  DFlashOverlapWorker under SGLang's overlap scheduler
  neither, or --disable-overlap-schedule
                                  DFlashWorker under SGLang's synchronous loop
  (SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1 moves the scheduler's KV planning to a side stream;
  SGLang's own draft state, which ours extends, implements it.)

Its own switches, `DFLASH_SGLANG_DISABLE=1` (the plugin does nothing) and `DFLASH_SGLANG_WORKER=builtin`
(keep the CPU layer, run SGLang's built-in DFLASH worker), are in environment.py with all the others.
"""

from __future__ import annotations

import logging
import os

from .environment import DISABLE, WORKER

logger = logging.getLogger(__name__)

OVERLAP_FLAGS = ("SGLANG_ENABLE_SPEC_V2", "SGLANG_ENABLE_DFLASH_SPEC_V2")


def overlap_requested() -> bool:
    on = ("1", "true", "yes", "on")
    return any(os.environ.get(flag, "").strip().lower() in on for flag in OVERLAP_FLAGS)


def register() -> None:
    if DISABLE.value():
        logger.info(f"dflash_sglang: disabled by {DISABLE.name}")
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .admission import cli_aliases, input_checks, replay_ssm, request_checks, startup_checks
    from .cpu import install as install_cpu_stand_ins
    from .tree import replay_ring
    from .tree import switches as tree_switches
    from .width import runtime_switch

    install_cpu_stand_ins()
    HookRegistry.register(cli_aliases.TARGET, cli_aliases.add_seed_card_aliases, HookType.AFTER)
    HookRegistry.register(startup_checks.TARGET, startup_checks.check_mamba_strategy, HookType.AROUND)
    for target, check in input_checks.HOOKS:
        HookRegistry.register(target, check, HookType.AROUND)
    if WORKER.value() == "builtin":
        return
    HookRegistry.register(
        "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker",
        _create_worker,
        HookType.AROUND,
    )
    HookRegistry.register(
        "sglang.srt.models.registry._ModelRegistry.resolve_model_cls",
        _resolve_model_cls,
        HookType.AROUND,
    )
    HookRegistry.register(
        "sglang.srt.arg_groups.speculative_hook._handle_dflash", _resolve_schedule, HookType.AFTER
    )
    HookRegistry.register(request_checks.TARGET, request_checks.refuse_unsupported_requests, HookType.AROUND)
    # `--enable-linear-replayssm-spec` on a GDN target: our commit replays it (admission/replay_ssm.py).
    HookRegistry.register(replay_ssm.TARGET, replay_ssm.build_pool_for_gdn_replay, HookType.AROUND)
    HookRegistry.register(replay_ssm.ASK_TARGET, replay_ssm.replay_when_asked, HookType.BEFORE)
    # A draft tree's verify through that ring: our tree replay, records per node (tree/replay_ring.py).
    HookRegistry.register(
        replay_ring.VERIFY_TARGET, replay_ring.verify_trees_through_the_ring, HookType.AROUND
    )
    # BEFORE and AFTER, not AROUND: the CPU layer already wraps `_handle_dflash` (cpu/platform/checks.py),
    # and SGLang warns at every startup about two AROUND hooks on one target.
    HookRegistry.register(tree_switches.HANDLE_DFLASH, tree_switches.declare_a_chain, HookType.BEFORE)
    HookRegistry.register(tree_switches.RING_CHECK, tree_switches.chain_for_the_ring_check, HookType.BEFORE)
    HookRegistry.register(tree_switches.HANDLE_DFLASH, tree_switches.declare_the_tree_width, HookType.AFTER)
    HookRegistry.register(
        tree_switches.CONV_WINDOW_DEDUP, tree_switches.dense_conv_windows_for_trees, HookType.AROUND
    )
    # `/set_internal_state` takes the verify policy's switches (width/runtime_switch.py).
    HookRegistry.register(runtime_switch.TARGET, runtime_switch.add_handlers, HookType.AROUND)


def _resolve_schedule(result, server_args):
    """AFTER _handle_dflash: without an overlap flag the schedule is synchronous."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    if not overlap_requested() and not resolving_view(server_args).disable_overlap_schedule:
        declare_resolution(server_args, __name__, disable_overlap_schedule=True)
        logger.info(
            "dflash_sglang: synchronous schedule (set SGLANG_ENABLE_SPEC_V2=1 for the overlap worker)"
        )
    return result


def _create_worker(original, algorithm, server_args):
    if not algorithm.is_dflash():
        return original(algorithm, server_args)
    from sglang.srt.arg_groups.overrides import resolving_view

    from .overlap import DFlashOverlapWorker
    from .worker import DFlashWorker

    return DFlashWorker if resolving_view(server_args).disable_overlap_schedule else DFlashOverlapWorker


def _resolve_model_cls(original, registry, architectures):
    """Our drafter for the drafter architectures we serve; the ones we do not, refused by name
    before SGLang builds them; SGLang's class for the rest (the worker refuses any that is the
    drafter, naming it: drafter/generations.py)."""
    from .drafter.generations import NOT_SERVED_YET, SERVED, check_generation

    first = architectures if isinstance(architectures, str) else (architectures or [None])[0]
    if first in NOT_SERVED_YET:
        check_generation({"architectures": [first]})  # raises, naming it
    if first not in SERVED:
        return original(registry, architectures)
    from .drafter.sglang_model import DFlashDraftModel

    return DFlashDraftModel, first
