"""The drafter variants' config fields (drafter/generations.py says which are served): read from
a published config.json as SGLang 0.5.23's `parse_dflash_draft_config` reads them, checked, and
written back. `DFlashConfig` (config.py) holds them as plain fields; zero or None is the plain
drafter. Engine-free.
"""

from __future__ import annotations

from typing import Any

from ..errors import DFlashConfigError
from .generations import LAGUNA_ARCHITECTURE, is_selector_architecture
from .laguna import gating_of


def variant_fields(raw: dict[str, Any], dflash: dict[str, Any]) -> dict[str, Any]:
    """Every variant's DFlashConfig fields from the config (`dflash` is its dflash_config)."""
    return dict(
        attention_sink_bias=_sink_bias(dflash.get("attention_sink_bias")),
        attention_value_scale=_value_scale(dflash.get("attention_value_scale")),
        conv_kernel_size=int_field("dflash_config.conv_kernel_size", dflash.get("conv_kernel_size") or 0),
        conv_group_size=int_field("dflash_config.conv_group_size", dflash.get("conv_group_size") or 0),
        **selector_fields(raw, dflash),
        **domino_fields(raw, dflash),
        **laguna_fields(raw),
    )


def check_variants(config) -> None:
    if bool(config.conv_kernel_size) != bool(config.conv_group_size):
        raise DFlashConfigError(
            f"dflash_config.conv_kernel_size = {config.conv_kernel_size} and conv_group_size = "
            f"{config.conv_group_size}: a grouped convolution needs both or neither"
        )
    if config.conv_group_size and config.hidden_size % config.conv_group_size:
        raise DFlashConfigError(
            f"dflash_config.conv_group_size = {config.conv_group_size} does not divide "
            f"hidden_size = {config.hidden_size}"
        )


def written_variant_fields(config) -> dict[str, Any]:
    """The dflash_config entries of `config`'s variants, as SGLang reads them back."""
    dflash: dict[str, Any] = {}
    if config.attention_sink_bias:
        dflash["attention_sink_bias"] = True
    if config.attention_value_scale is not None:
        dflash["attention_value_scale"] = config.attention_value_scale
    if config.conv_kernel_size:
        dflash.update(conv_kernel_size=config.conv_kernel_size, conv_group_size=config.conv_group_size)
    if config.selector_rank:
        dflash.update(selector_rank=config.selector_rank, selector_top_k=config.selector_top_k,
                      output_multiplier=config.output_multiplier)  # fmt: skip
        if config.final_logit_softcapping is not None:
            dflash["final_logit_softcapping"] = config.final_logit_softcapping
    if config.domino_gru_dim:
        dflash.update(projector_type="domino", shift_label=config.domino_shift_label, pure_draft_prefix_len=1,
                      gru_hidden_dim=config.domino_gru_dim, emb_dim=config.domino_emb_dim)  # fmt: skip
    return dflash


def int_field(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DFlashConfigError(f"{name} = {value!r}: expected an integer")
    return value


def selector_fields(raw: dict[str, Any], dflash: dict[str, Any]) -> dict[str, Any]:
    """DFlash2's fields; a plain DFlashDraftModel's selector fields are ignored, as SGLang does."""
    if not is_selector_architecture(raw.get("architectures")):
        return {}
    rank, top_k = dflash.get("selector_rank") or 0, dflash.get("selector_top_k") or 0
    if not (rank and top_k):
        raise DFlashConfigError(
            f"dflash_config.selector_rank = {rank} and selector_top_k = {top_k}: a DFlash2 drafter "
            "needs both (its candidate selector)"
        )
    multiplier, softcap = dflash.get("output_multiplier", 1.0), dflash.get("final_logit_softcapping")
    if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or multiplier <= 0:
        raise DFlashConfigError(
            f"dflash_config.output_multiplier = {multiplier!r}: expected a positive number"
        )
    if raw.get("vocab_size") is None:
        raise DFlashConfigError(
            "vocab_size is missing: a DFlash2 drafter's selector tables have a row a token"
        )
    return dict(
        selector_rank=int_field("dflash_config.selector_rank", rank),
        selector_top_k=int_field("dflash_config.selector_top_k", top_k),
        output_multiplier=float(multiplier),
        final_logit_softcapping=float(softcap) if softcap else None,
    )


def laguna_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """Laguna's: SGLang gates its attention per head unless `gating` says otherwise."""
    if LAGUNA_ARCHITECTURE not in (raw.get("architectures") or ()):
        return {}
    return dict(laguna=True, laguna_gating=gating_of(raw.get("gating", True)))


def domino_fields(raw: dict[str, Any], dflash: dict[str, Any]) -> dict[str, Any]:
    """Domino's fields (`projector_type: "domino"`, dflash_config first, then the top level)."""
    kind = dflash.get("projector_type", raw.get("projector_type"))
    if not kind:
        return {}
    if kind != "domino":
        raise DFlashConfigError(
            f"projector_type = {kind!r}: the only projector SGLang and dflash_sglang know is 'domino'"
        )

    def field(name: str) -> Any:
        return dflash.get(name, raw.get(name))

    if not isinstance(field("shift_label"), bool):
        raise DFlashConfigError(
            f"dflash_config.shift_label = {field('shift_label')!r}: a Domino drafter needs true or false"
        )
    if field("pure_draft_prefix_len") != 1:
        raise DFlashConfigError(
            f"dflash_config.pure_draft_prefix_len = {field('pure_draft_prefix_len')!r}: Domino drafts "
            "its first token without the GRU, so it must be 1"
        )
    if raw.get("vocab_size") is None:
        raise DFlashConfigError("vocab_size is missing: a Domino drafter's correction has a row a token")
    return dict(
        domino_gru_dim=int_field("dflash_config.gru_hidden_dim", field("gru_hidden_dim")),
        domino_emb_dim=int_field("dflash_config.emb_dim", field("emb_dim")),
        domino_shift_label=field("shift_label"),
    )


def _sink_bias(value: Any) -> bool:
    if value is not None and not isinstance(value, bool):
        raise DFlashConfigError(f"dflash_config.attention_sink_bias = {value!r}: expected true or false")
    return bool(value)


def _value_scale(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise DFlashConfigError(
            f"dflash_config.attention_value_scale = {value!r}: expected a positive number"
        )
    return float(value)
