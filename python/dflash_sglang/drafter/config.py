"""The drafter's config.json (the published z-lab format) as a validated dataclass.

Published drafters look like this (Qwen3-8B-DFlash-b16, abridged):

    {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 4096,
     "num_hidden_layers": 5, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
     "intermediate_size": 12288, "block_size": 16, "num_target_layers": 36,
     "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
     "layer_types": ["full_attention", ...], "sliding_window": null, "rope_theta": 1000000,
     "rope_scaling": null, "rms_norm_eps": 1e-06, ...}

Newer drafters move `block_size` into `dflash_config`; every DFlash field is read from
`dflash_config` first and from the top level second, as upstream does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..errors import DFlashConfigError
from .generations import LAGUNA_ARCHITECTURE, SELECTOR_ARCHITECTURE, check_generation
from .variants import check_variants, int_field, variant_fields, written_variant_fields

ARCHITECTURE = "DFlashDraftModel"
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"


def default_target_layer_ids(num_target_layers: int, num_features: int) -> list[int]:
    """Target layers spread evenly from layer 1 to layer N-3 (z-lab's rule; N//2 for one feature).

    Python's round() is banker's rounding, as in the reference implementation.
    """
    if num_features == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [int(round(1 + i * span / (num_features - 1))) for i in range(num_features)]


@dataclasses.dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int | None = None
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    # Sliding layers are causal within the block unless the config says otherwise (later z-lab code).
    sliding_is_causal: bool = True
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    hidden_act: str = "silu"
    max_position_embeddings: int = 40960
    vocab_size: int | None = None
    # MiMo-style variant (dflash_config): a learned sink logit per query head in every layer's
    # softmax, and values (of the block and the injected context alike) scaled by a constant.
    attention_sink_bias: bool = False
    attention_value_scale: float | None = None
    # The grouped-convolution variant (drafter/conv.py): taps and channels a group, 0 = none.
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    # DFlash2 (drafter/selector.py): candidates a position and the transition tables' rank, 0 =
    # plain DFlash; the candidates' logits are scaled, then soft-capped (only the selector reads them).
    selector_top_k: int = 0
    selector_rank: int = 0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    # Domino (drafter/domino.py, `projector_type: "domino"`): the GRU's and the correction's widths,
    # 0 = plain; shift_label: the drafts come from block positions 0..B-2 instead of 1..B-1.
    domino_gru_dim: int = 0
    domino_emb_dim: int = 0
    domino_shift_label: bool = False
    # Laguna (drafter/laguna.py): its attention gate ("per-head", "per-element" or None) and the
    # per-feature norms and context norm that come with the architecture.
    laguna: bool = False
    laguna_gating: str | None = None

    # ---- reading -------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | Path) -> DFlashConfig:
        """Read `path/config.json` (or `path` itself when it is the json file)."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"drafter config not found: {file}")
        try:
            raw = json.loads(file.read_text())
        except json.JSONDecodeError as e:
            raise DFlashConfigError(f"{file} is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DFlashConfig:
        check_generation(raw)  # an architecture or variant we do not serve, named
        dflash = raw.get("dflash_config")
        if not isinstance(dflash, dict):
            raise DFlashConfigError(
                f"dflash_config = {dflash!r}: a DFlash drafter config needs a `dflash_config` object "
                "with at least `mask_token_id`"
            )

        def dflash_field(name: str, default: Any = None) -> Any:
            return dflash.get(name, raw.get(name, default))

        hidden = _require_int(raw, "hidden_size")
        layers = _require_int(raw, "num_hidden_layers")
        heads = _require_int(raw, "num_attention_heads")
        kv_heads = int_field("num_key_value_heads", raw.get("num_key_value_heads", heads))
        head_dim = int_field("head_dim", raw.get("head_dim") or hidden // heads)
        mask_id = dflash_field("mask_token_id")
        if mask_id is None:
            raise DFlashConfigError(
                "dflash_config.mask_token_id is missing: the drafter needs the id of its mask token"
            )
        num_target_layers = dflash_field("num_target_layers")
        layer_ids = dflash_field("target_layer_ids")
        if layer_ids is None:
            if num_target_layers is None:
                raise DFlashConfigError(
                    "dflash_config.target_layer_ids is missing and so is num_target_layers, "
                    "so the default layer ids cannot be derived"
                )
            layer_ids = default_target_layer_ids(int(num_target_layers), layers)
        rope_theta, rope_scaling = _rope(raw)
        causal = dflash_field("is_causal")
        config = cls(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=_require_int(raw, "intermediate_size"),
            block_size=int_field("block_size", dflash_field("block_size", 16)),
            mask_token_id=int_field("dflash_config.mask_token_id", mask_id),
            target_layer_ids=tuple(int_field("dflash_config.target_layer_ids", i) for i in layer_ids),
            num_target_layers=None if num_target_layers is None else int(num_target_layers),
            layer_types=tuple(raw.get("layer_types") or [FULL_ATTENTION] * layers),
            sliding_window=raw.get("sliding_window"),
            sliding_is_causal=True if causal is None else bool(causal),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            attention_bias=bool(raw.get("attention_bias", False)),
            hidden_act=str(raw.get("hidden_act", "silu")),
            max_position_embeddings=int(raw.get("max_position_embeddings", 40960)),
            vocab_size=raw.get("vocab_size"),
            **variant_fields(raw, dflash),  # drafter/variants.py
        )
        config.check()
        return config

    # ---- checks ------------------------------------------------------------------------------

    def check(self) -> None:
        if self.block_size < 2:
            raise DFlashConfigError(
                f"block_size = {self.block_size}: a block needs the verified token and at least "
                "one mask position (block_size >= 2)"
            )
        if not self.target_layer_ids:
            raise DFlashConfigError("dflash_config.target_layer_ids = []: need at least one layer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise DFlashConfigError(
                f"num_key_value_heads = {self.num_key_value_heads} does not divide "
                f"num_attention_heads = {self.num_attention_heads}"
            )
        if len(self.layer_types) != self.num_hidden_layers:
            raise DFlashConfigError(
                f"layer_types has {len(self.layer_types)} entries but num_hidden_layers = "
                f"{self.num_hidden_layers}"
            )
        for kind in self.layer_types:
            if kind not in (FULL_ATTENTION, SLIDING_ATTENTION):
                raise DFlashConfigError(
                    f"layer_types contains {kind!r}: expected {FULL_ATTENTION!r} or {SLIDING_ATTENTION!r}"
                )
        check_variants(self)
        if SLIDING_ATTENTION in self.layer_types and not (
            isinstance(self.sliding_window, int) and self.sliding_window > 0
        ):
            raise DFlashConfigError(
                f"sliding_window = {self.sliding_window!r}: layer_types has sliding layers, "
                "which need a positive window"
            )

    def validate_against(self, target_config: Any) -> None:
        """Check that this drafter fits `target_config` (a transformers config or a dict)."""
        target = _text_config(target_config)
        hidden = _get(target, "hidden_size")
        if hidden != self.hidden_size:
            raise DFlashConfigError(
                f"hidden_size = {self.hidden_size} does not match the target's hidden_size = "
                f"{hidden}: the drafter reads the target's embeddings and hidden states"
            )
        layers = _get(target, "num_hidden_layers")
        # Layer L's output is the input of layer L+1, so the last layer cannot be captured.
        for layer in self.target_layer_ids:
            if not 0 <= layer <= layers - 2:
                raise DFlashConfigError(
                    f"dflash_config.target_layer_ids contains {layer}: the target has {layers} "
                    f"layers, so ids must lie in 0..{layers - 2}"
                )
        vocab = _get(target, "vocab_size")
        if not 0 <= self.mask_token_id < vocab:
            raise DFlashConfigError(
                f"dflash_config.mask_token_id = {self.mask_token_id} is outside the target's "
                f"vocabulary (vocab_size = {vocab})"
            )

    # ---- derived values ----------------------------------------------------------------------

    @property
    def num_target_features(self) -> int:
        return len(self.target_layer_ids)

    def window_of(self, layer: int) -> int | None:
        """The attention window of drafter layer `layer` (None: full attention)."""
        return self.sliding_window if self.layer_types[layer] == SLIDING_ATTENTION else None

    def is_causal(self, layer: int) -> bool:
        """Full-attention layers are bidirectional in the block; sliding layers usually causal."""
        return self.layer_types[layer] == SLIDING_ATTENTION and self.sliding_is_causal

    # ---- writing -----------------------------------------------------------------------------

    @property
    def architecture(self) -> str:
        """What the published config declares (SGLang builds its class from it)."""
        return (
            LAGUNA_ARCHITECTURE
            if self.laguna
            else SELECTOR_ARCHITECTURE
            if self.selector_rank
            else ARCHITECTURE
        )

    def to_dict(self) -> dict[str, Any]:
        """The published on-disk format (what `from_dict` reads back to an equal config)."""
        dflash: dict[str, Any] = {
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
        }
        if SLIDING_ATTENTION in self.layer_types and not self.sliding_is_causal:
            dflash["is_causal"] = False
        dflash.update(written_variant_fields(self))
        out: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "block_size": self.block_size,
            "dflash_config": dflash,
            "layer_types": list(self.layer_types),
            "sliding_window": self.sliding_window,
            "use_sliding_window": self.sliding_window is not None,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "rms_norm_eps": self.rms_norm_eps,
            "attention_bias": self.attention_bias,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": False,
        }
        if self.laguna:  # SGLang reads Laguna's gating at the top level
            out["gating"] = self.laguna_gating or "disabled"
        if self.num_target_layers is not None:
            out["num_target_layers"] = self.num_target_layers
        if self.vocab_size is not None:
            out["vocab_size"] = self.vocab_size
        return out

    def save_pretrained(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _require_int(raw: dict[str, Any], name: str) -> int:
    if name not in raw:
        raise DFlashConfigError(f"{name} is missing from the drafter config")
    value = int_field(name, raw[name])
    if value <= 0:
        raise DFlashConfigError(f"{name} = {value}: expected a positive integer")
    return value


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """rope_theta/rope_scaling, or transformers 5's combined `rope_parameters`."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" not in raw:
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
        if scaling.get("rope_type", "default") == "default":
            scaling = None
        return float(params.get("rope_theta", 10000.0)), scaling
    return float(raw.get("rope_theta", 10000.0)), raw.get("rope_scaling")


def _text_config(config: Any) -> Any:
    """Multimodal targets (Qwen3.5/3.6) keep the language model's fields in text_config."""
    text = _get(config, "text_config", required=False)
    return text if text is not None else config


def _get(config: Any, name: str, required: bool = True) -> Any:
    value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    if value is None and required:
        raise DFlashConfigError(f"the target config has no `{name}`")
    return value
