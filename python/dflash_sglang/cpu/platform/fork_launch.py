"""Opt-in: a `--device cpu` server forks its scheduler and detokenizer processes instead of
spawning them (DFLASH_SGLANG_FORK_SUBPROCESSES=1).

SGLang spawns every subprocess (`_set_envs_and_config` sets the "spawn" start method, which CUDA
needs), so each one imports SGLang again: about 20 s of a CPU server's 45 s start on a 2-core
machine. A CPU server holds no CUDA context to inherit, so a fork is safe there, and its children
run the same code from the launcher's imports. The tests turn it on (tests/server/conftest.py)
and keep the README's own commands on SGLang's spawn; with a GPU, or the variable unset, nothing
changes.
"""

from __future__ import annotations

import logging
import multiprocessing

from ...environment import FORK_SUBPROCESSES

logger = logging.getLogger(__name__)

TARGET = "sglang.srt.entrypoints.engine._set_envs_and_config"
SWITCH = FORK_SUBPROCESSES.name


def fork_requested() -> bool:
    return FORK_SUBPROCESSES.value()


def fork_subprocesses_on_cpu(original, server_args, *args, **kwargs):
    """AROUND _set_envs_and_config: SGLang's settings, then fork for a cpu server on request."""
    result = original(server_args, *args, **kwargs)
    from sglang.srt.arg_groups.overrides import resolving_view

    if fork_requested() and resolving_view(server_args).device == "cpu":
        multiprocessing.set_start_method("fork", force=True)
        logger.info(f"dflash_sglang: subprocesses fork from the launcher ({SWITCH}=1, cpu server)")
    return result
