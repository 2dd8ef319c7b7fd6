"""The SGLang-side drafter's settings agree with SGLang's own reading of a DFlash config."""


def test_drafter_windows_follow_sglangs_convention():
    """SGLang's attention takes window_left (HF window - 1); ours must agree with SGLang's own
    reading of a sliding DFlash config, or the server's drafter sees one key more than the
    reference's."""
    from sglang.srt.speculative.dflash_utils import get_dflash_attention_sliding_window_size

    from dflash_sglang.config import DFlashConfig
    from dflash_sglang.sglang_draft import sglang_window

    raw = {"architectures": ["DFlashDraftModel"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128, "sliding_window": 16,
           "layer_types": ["sliding_attention", "full_attention"],
           "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1]}}  # fmt: skip
    config = DFlashConfig.from_dict(raw)
    assert sglang_window(config, 0) == get_dflash_attention_sliding_window_size(raw) == 15
    assert sglang_window(config, 1) == -1
