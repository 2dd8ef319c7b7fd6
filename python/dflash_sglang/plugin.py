"""SGLang plugin entry point (group `sglang.srt.plugins`), loaded by SGLang in every process.

Through SGLang's HookRegistry it
- makes `--speculative-algorithm DFLASH` build this package's worker,
- resolves `architectures: ["DFlashDraftModel"]` to this package's draft model,
- installs the torch stand-ins for GPU-only kernels; each one acts only on CPU tensors and
  hands GPU tensors to SGLang's own kernel.

Environment:
  DFLASH_SGLANG_DISABLE=1         the plugin does nothing
  DFLASH_SGLANG_WORKER=builtin    keep the CPU layer, run SGLang's built-in DFLASH worker
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

DRAFT_ARCHITECTURE = "DFlashDraftModel"


def worker_choice() -> str:
    choice = os.environ.get("DFLASH_SGLANG_WORKER", "dflash_sglang").strip().lower()
    if choice not in ("dflash_sglang", "builtin"):
        raise ValueError(f"DFLASH_SGLANG_WORKER={choice!r}: expected 'dflash_sglang' or 'builtin'")
    return choice


def register() -> None:
    if os.environ.get("DFLASH_SGLANG_DISABLE", "") in ("1", "true", "yes"):
        logger.info("dflash_sglang: disabled by DFLASH_SGLANG_DISABLE")
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from .cpu import install as install_cpu_stand_ins

    install_cpu_stand_ins()
    if worker_choice() == "builtin":
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


def _create_worker(original, algorithm, server_args):
    if not algorithm.is_dflash():
        return original(algorithm, server_args)
    from .worker import DFlashWorker

    return DFlashWorker


def _resolve_model_cls(original, registry, architectures):
    first = architectures if isinstance(architectures, str) else (architectures or [None])[0]
    if first != DRAFT_ARCHITECTURE:
        return original(registry, architectures)
    from .sglang_draft import DFlashDraftModel

    return DFlashDraftModel, first
