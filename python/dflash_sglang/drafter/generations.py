"""Drafter generations: which architectures and `dflash_config` variants SGLang 0.5.23's built-in
DFLASH loads (sglang/srt/models/dflash.py, lilicorr.py), and which of them this package serves.

A checkpoint names its generation in `architectures` and its variant in `dflash_config` fields.
What this package does not serve yet is refused when the config is read, naming the architecture
or the field and the switch that serves it (`DFLASH_SGLANG_WORKER=builtin`), never by a traceback
from a worker that took another model for ours. Engine-free: no SGLang import.
"""

from __future__ import annotations

from typing import Any

from ..errors import DFlashConfigError

# architecture -> what it is; all load as this package's drafter
SERVED = {
    "DFlashDraftModel": "DFlash",
    "MuseGlimmerAssistantModel": "DFlash (SGLang loads it as an alias of DFlashDraftModel)",
    "DFlash2DraftModel": "DFlash2: DFlash with a candidate selector (drafter/selector.py)",
    "DFlash2BeamDraftModel": "DFlash2 (SGLang's alias)",
    "MiniMaxDFlash2DraftModel": "DFlash2 (SGLang's alias)",
    "DFlashLagunaForCausalLM": "DFlash for Laguna: gated attention, per-feature norms (drafter/laguna.py)",
}
LAGUNA_ARCHITECTURE = "DFlashLagunaForCausalLM"
SELECTOR_ARCHITECTURES = ("DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel")
SELECTOR_ARCHITECTURE = SELECTOR_ARCHITECTURES[0]  # what a DFlash2 config we write declares
NOT_SERVED_YET = {
    "LiLiCorrDraftModel": "LiLiCorr (learned candidate-correlation head)",
}
BUILTIN = "SGLang's built-in worker serves it (DFLASH_SGLANG_WORKER=builtin)"


def is_selector_architecture(archs) -> bool:
    """A DFlash2 drafter: the architecture SGLang gives a candidate selector."""
    return any(arch in SELECTOR_ARCHITECTURES for arch in archs or ())


def check_generation(raw: dict[str, Any]) -> None:
    """Refuse, naming it, an architecture or variant this package's drafter does not implement."""
    archs = raw.get("architectures")
    if archs is not None:
        served = [arch for arch in archs if arch in SERVED]
        if not served:
            known = [arch for arch in archs if arch in NOT_SERVED_YET]
            what = "not a DFlash drafter architecture"
            if known:
                what = f"a {NOT_SERVED_YET[known[0]]} drafter, not served by dflash_sglang yet; {BUILTIN}"
            raise DFlashConfigError(f"architectures = {archs!r}: {what}. dflash_sglang serves {list(SERVED)}")
    if raw.get("attention_sink_bias"):  # Nemotron-3.5's sinks sit at the top level (MiMo's in dflash_config)
        raise DFlashConfigError(
            "attention_sink_bias = true at the top level: a Nemotron-3.5 drafter (its own embedding, "
            f"sinks on the trtllm_mha backend), which dflash_sglang does not serve yet; {BUILTIN}"
        )
