"""The SGLang-side drafter's settings agree with SGLang's own reading of a DFlash config."""


def test_drafter_windows_follow_sglangs_convention():
    """SGLang's attention takes window_left (HF window - 1); ours must agree with SGLang's own
    reading of a sliding DFlash config, or the server's drafter sees one key more than the
    reference's."""
    from sglang.srt.speculative.dflash_utils import get_dflash_attention_sliding_window_size

    from dflash_sglang.drafter.config import DFlashConfig
    from dflash_sglang.drafter.sglang_model import sglang_window

    raw = {"architectures": ["DFlashDraftModel"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "sliding_window": 16,
           "layer_types": ["sliding_attention", "full_attention"],
           "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1]}}  # fmt: skip
    config = DFlashConfig.from_dict(raw)
    assert sglang_window(config, 0) == get_dflash_attention_sliding_window_size(raw) == 15
    assert sglang_window(config, 1) == -1


def test_checkpoint_names_map_onto_the_sharded_layers():
    """Published names (q_proj, gate_proj, ...) land in the fused parallel layers with their shard
    id; every other name is its own parameter. The expected shapes are the plain model's."""
    from dflash_sglang.drafter.config import DFlashConfig
    from dflash_sglang.drafter.model import DFlashDraftModel
    from dflash_sglang.drafter.sglang_layers import checkpoint_shapes, parameter_of

    raw = {"architectures": ["DFlashDraftModel"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
           "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 2]}}  # fmt: skip
    config = DFlashConfig.from_dict(raw)
    shapes = checkpoint_shapes(config)
    plain = DFlashDraftModel(config)
    assert shapes == {name: p.shape for name, p in plain.named_parameters()}
    assert parameter_of("layers.1.self_attn.k_proj.weight") == ("layers.1.self_attn.qkv_proj.weight", "k")
    assert parameter_of("layers.0.mlp.up_proj.weight") == ("layers.0.mlp.gate_up_proj.weight", 1)
    assert parameter_of("layers.0.self_attn.o_proj.weight") == ("layers.0.self_attn.o_proj.weight", None)
    assert parameter_of("fc.weight") == ("fc.weight", None)
