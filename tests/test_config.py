"""DFlashConfig: the published format, defaults, round trips, and an error naming the field for
every config that cannot work."""

import json

import pytest
from transformers import Qwen3Config

from dflash_sglang.drafter.config import DFlashConfig, DFlashConfigError, default_target_layer_ids
from dflash_sglang_tools.gpu_check.shapes import QWEN3_8B_DRAFT

# z-lab/Qwen3-8B-DFlash-b16's config.json, as published (one copy, shared with make gpu-check).
QWEN3_8B_TARGET = {"hidden_size": 4096, "num_hidden_layers": 36, "vocab_size": 151936}


def with_changes(**changes):
    raw = json.loads(json.dumps(QWEN3_8B_DRAFT))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def variant(**fields):
    """The published config's dflash_config with a variant's fields added."""
    return {"dflash_config": {**QWEN3_8B_DRAFT["dflash_config"], **fields}}


def test_published_config_parses():
    c = DFlashConfig.from_dict(QWEN3_8B_DRAFT)
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (
        4096,
        5,
        32,
        8,
    )
    assert c.head_dim == 128 and c.block_size == 16 and c.mask_token_id == 151669
    assert c.target_layer_ids == (1, 9, 17, 25, 33) and c.num_target_features == 5
    assert c.rope_theta == 1e6 and c.rope_scaling is None and c.sliding_window is None
    assert all(c.window_of(i) is None and not c.is_causal(i) for i in range(5))
    c.validate_against(QWEN3_8B_TARGET)
    c.validate_against(Qwen3Config(**QWEN3_8B_TARGET))


def test_round_trip_through_disk(tmp_path):
    c = DFlashConfig.from_dict(QWEN3_8B_DRAFT)
    c.save_pretrained(tmp_path)
    assert DFlashConfig.from_pretrained(tmp_path) == c
    assert DFlashConfig.from_pretrained(tmp_path / "config.json") == c
    assert DFlashConfig.from_dict(c.to_dict()) == c


def test_sliding_window_drafter_round_trips():
    raw = with_changes(layer_types=["sliding_attention"] * 4 + ["full_attention"], sliding_window=2048)
    c = DFlashConfig.from_dict(raw)
    assert [c.window_of(i) for i in range(5)] == [2048] * 4 + [None]
    assert [c.is_causal(i) for i in range(5)] == [True] * 4 + [False]
    assert DFlashConfig.from_dict(c.to_dict()) == c
    explicit = with_changes(
        layer_types=raw["layer_types"],
        sliding_window=2048,
        dflash_config={"mask_token_id": 1, "target_layer_ids": [1], "is_causal": False},
    )
    c = DFlashConfig.from_dict(explicit)
    assert not c.is_causal(0) and DFlashConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "layers,features,expected",
    [
        (36, 5, [1, 9, 17, 25, 33]),
        (32, 5, [1, 8, 15, 22, 29]),
        (40, 5, [1, 10, 19, 28, 37]),
        (48, 5, [1, 12, 23, 34, 45]),
        (64, 5, [1, 16, 31, 46, 61]),
        (60, 6, [1, 12, 23, 35, 46, 57]),
        (36, 1, [18]),
    ],
)
def test_default_target_layer_ids(layers, features, expected):
    assert default_target_layer_ids(layers, features) == expected


def test_defaults_where_published_drafters_omit_fields():
    raw = with_changes(
        dflash_config={"mask_token_id": 7}, layer_types=None, head_dim=None, num_key_value_heads=None
    )
    c = DFlashConfig.from_dict(raw)
    assert c.target_layer_ids == (1, 9, 17, 25, 33)  # one per drafter layer, from 1 to N-3
    assert c.layer_types == ("full_attention",) * 5
    assert c.head_dim == 4096 // 32 and c.num_key_value_heads == 32


def test_sglangs_aliases_and_plain_variant_values_parse():
    """MuseGlimmerAssistantModel is SGLang's alias of DFlashDraftModel; a variant field at its
    plain value, and DFlash2's logit scalings (which only its selector reads), change nothing."""
    plain = DFlashConfig.from_dict(QWEN3_8B_DRAFT)
    fields = dict(conv_kernel_size=0, attention_sink_bias=False, projector_type=None,
                  output_multiplier=2.0, final_logit_softcapping=30.0)  # fmt: skip
    raw = with_changes(architectures=["MuseGlimmerAssistantModel"], **variant(**fields))
    assert DFlashConfig.from_dict(raw) == plain


@pytest.mark.parametrize(
    "architecture", ["DFlash2DraftModel", "DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"]
)
def test_a_dflash2_config_parses_and_round_trips(tmp_path, architecture):
    """SGLang's DFlash2 names (one model, three names); a plain DFlashDraftModel's selector fields
    are ignored, as SGLang's plain class has no selector."""
    fields = dict(selector_rank=16, selector_top_k=8, output_multiplier=2.0, final_logit_softcapping=30.0)
    raw = with_changes(architectures=[architecture], vocab_size=151936, **variant(**fields))
    config = DFlashConfig.from_dict(raw)
    assert (config.selector_rank, config.selector_top_k, config.output_multiplier) == (16, 8, 2.0)
    assert config.final_logit_softcapping == 30.0
    config.save_pretrained(tmp_path)
    assert DFlashConfig.from_pretrained(tmp_path) == config
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["DFlash2DraftModel"]
    plain = DFlashConfig.from_dict(with_changes(vocab_size=151936, **variant(**fields)))
    assert plain.selector_rank == 0 and plain.output_multiplier == 1.0


@pytest.mark.parametrize(
    "gating,expected",
    [
        (None, "per-head"),
        (True, "per-head"),
        ("per-element", "per-element"),
        (False, None),
        ("disabled", None),
    ],
)
def test_a_laguna_config_parses_and_round_trips(tmp_path, gating, expected):
    """SGLang gates a Laguna drafter's attention per head unless `gating` says otherwise."""
    raw = with_changes(architectures=["DFlashLagunaForCausalLM"], gating=gating)
    config = DFlashConfig.from_dict(raw)
    assert config.laguna and config.laguna_gating == expected
    config.save_pretrained(tmp_path)
    assert DFlashConfig.from_pretrained(tmp_path) == config


def test_block_size_inside_dflash_config_wins():
    raw = with_changes(dflash_config={"mask_token_id": 7, "target_layer_ids": [1], "block_size": 8})
    assert DFlashConfig.from_dict(raw).block_size == 8


def test_rope_parameters_of_transformers_5():
    raw = with_changes(
        rope_theta=None, rope_scaling=None, rope_parameters={"rope_type": "default", "rope_theta": 5e6}
    )
    c = DFlashConfig.from_dict(raw)
    assert c.rope_theta == 5e6 and c.rope_scaling is None


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"dflash_config": None}, ["dflash_config", "None"]),
        ({"dflash_config": {"target_layer_ids": [1]}}, ["dflash_config.mask_token_id"]),
        (
            {"dflash_config": {"mask_token_id": 1}, "num_target_layers": None},
            ["target_layer_ids", "num_target_layers"],
        ),
        ({"block_size": 1}, ["block_size", "1"]),
        ({"architectures": ["LlamaForCausalLM"]}, ["architectures", "LlamaForCausalLM", "DFlashDraftModel"]),
        ({"architectures": ["DFlash2DraftModel"]}, ["dflash_config.selector_rank", "DFlash2"]),
        (
            {
                "architectures": ["DFlash2DraftModel"],
                **variant(selector_rank=8, selector_top_k=4, output_multiplier=0),
            },
            ["dflash_config.output_multiplier", "0"],
        ),
        ({"architectures": ["LiLiCorrDraftModel"]}, ["LiLiCorr", "DFLASH_SGLANG_WORKER=builtin"]),
        ({"architectures": ["DFlashLagunaForCausalLM"], "gating": "per-token"}, ["gating", "per-token"]),
        (variant(conv_kernel_size=4), ["dflash_config.conv_kernel_size", "both or neither"]),
        (variant(conv_kernel_size=4, conv_group_size=48), ["dflash_config.conv_group_size", "4096"]),
        (variant(attention_sink_bias="yes"), ["dflash_config.attention_sink_bias", "true or false"]),
        (variant(attention_value_scale=-1), ["dflash_config.attention_value_scale", "positive"]),
        ({"attention_sink_bias": True}, ["attention_sink_bias", "Nemotron", "builtin"]),
        (variant(projector_type="domino", shift_label=True), ["pure_draft_prefix_len", "Domino"]),
        (variant(projector_type="medusa"), ["projector_type", "medusa"]),
        (variant(projector_type="domino", shift_label="yes"), ["dflash_config.shift_label", "true or false"]),
        ({"hidden_size": None}, ["hidden_size", "missing"]),
        ({"num_hidden_layers": "5"}, ["num_hidden_layers", "'5'"]),
        ({"num_key_value_heads": 7}, ["num_key_value_heads", "7"]),
        ({"layer_types": ["full_attention"] * 4}, ["layer_types", "4", "5"]),
        ({"layer_types": ["full_attention"] * 4 + ["linear_attention"]}, ["layer_types", "linear_attention"]),
        ({"layer_types": ["sliding_attention"] * 5}, ["sliding_window", "None"]),
        (
            {"dflash_config": {"mask_token_id": "<|MASK|>", "target_layer_ids": [1]}},
            ["dflash_config.mask_token_id", "<|MASK|>"],
        ),
    ],
)
def test_config_errors_name_the_field(changes, words):
    with pytest.raises(DFlashConfigError) as err:
        DFlashConfig.from_dict(with_changes(**changes))
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    "target,words",
    [
        ({**QWEN3_8B_TARGET, "hidden_size": 2560}, ["hidden_size", "4096", "2560"]),
        ({**QWEN3_8B_TARGET, "num_hidden_layers": 28}, ["target_layer_ids", "33", "28"]),
        ({**QWEN3_8B_TARGET, "num_hidden_layers": 34}, ["target_layer_ids", "33", "0..32"]),
        ({**QWEN3_8B_TARGET, "vocab_size": 151669}, ["mask_token_id", "151669", "vocab_size"]),
    ],
)
def test_validate_against_target_names_the_field(target, words):
    config = DFlashConfig.from_dict(QWEN3_8B_DRAFT)
    with pytest.raises(DFlashConfigError) as err:
        config.validate_against(target)
    for word in words:
        assert word in str(err.value)


def test_validate_against_reads_text_config_of_multimodal_targets():
    config = DFlashConfig.from_dict(QWEN3_8B_DRAFT)
    config.validate_against({"text_config": QWEN3_8B_TARGET})
    with pytest.raises(DFlashConfigError, match="hidden_size"):
        config.validate_against({"text_config": {**QWEN3_8B_TARGET, "hidden_size": 5120}})


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        DFlashConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(DFlashConfigError, match="not valid JSON"):
        DFlashConfig.from_pretrained(tmp_path)
