"""The plain-PyTorch draft model: published parameter names, lossless save/load, the attention
visibility of full and sliding layers, and an incremental context cache equal to one big call."""

import pytest
import torch

from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel, block_visibility
from dflash_sglang.testing.tiny_dense import TinyShape, tiny_draft


def run_block(draft, target, context_len, seed=0, block=None):
    """One draft call over `context_len` fresh context positions; returns the hidden block."""
    g = torch.Generator().manual_seed(seed)
    config = draft.config
    block = block or config.block_size
    features = torch.randn(1, context_len, config.num_target_features * config.hidden_size, generator=g)
    ids = torch.randint(0, target.config.vocab_size, (1, block), generator=g)
    cache = DraftContextCache(config.num_hidden_layers)
    positions = torch.arange(context_len + block).view(1, -1)
    with torch.no_grad():
        return draft(
            target.get_input_embeddings()(ids),
            positions[:, context_len:],
            features,
            positions[:, :context_len],
            cache,
        )


def test_parameter_names_are_the_published_ones(draft):
    names = set(draft.state_dict())
    for expected in [
        "fc.weight",
        "hidden_norm.weight",
        "norm.weight",
        "layers.0.self_attn.q_proj.weight",
        "layers.0.self_attn.k_proj.weight",
        "layers.0.self_attn.v_proj.weight",
        "layers.0.self_attn.o_proj.weight",
        "layers.0.self_attn.q_norm.weight",
        "layers.0.self_attn.k_norm.weight",
        "layers.0.mlp.gate_proj.weight",
        "layers.0.mlp.up_proj.weight",
        "layers.0.mlp.down_proj.weight",
        "layers.0.input_layernorm.weight",
        "layers.0.post_attention_layernorm.weight",
    ]:
        assert expected in names
    assert not any("embed" in n or "lm_head" in n for n in names)  # the target's are used


def test_save_and_load_gives_identical_outputs(tmp_path, target, draft):
    draft.save_pretrained(tmp_path)
    loaded = DFlashDraftModel.from_pretrained(tmp_path)
    assert loaded.config == draft.config
    assert torch.equal(run_block(loaded, target, 9), run_block(draft, target, 9))


def test_loading_mismatched_weights_fails_with_names(tmp_path, target):
    tiny_draft(target.config, TinyShape(draft_layers=2)).save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    config_file.write_text(
        config_file.read_text()
        .replace('"num_hidden_layers": 2', '"num_hidden_layers": 3')
        .replace('"full_attention"\n', '"full_attention",\n    "full_attention"\n')
    )
    with pytest.raises(ValueError, match="layers.2"):
        DFlashDraftModel.from_pretrained(tmp_path)


def test_block_visibility_full_and_sliding():
    q = torch.tensor([[10, 11, 12]])
    k = torch.tensor([[0, 8, 9, 10, 11, 12]])
    assert block_visibility(q, k, None, causal=False).all()
    causal_window = block_visibility(q, k, 3, causal=True)[0].int().tolist()
    assert causal_window == [[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    symmetric = block_visibility(q, k, 2, causal=False)[0].int().tolist()
    assert symmetric == [[0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]]


def test_block_sees_the_whole_block_in_full_layers(target, draft):
    """Non-causal: changing the last block token changes the first block position's output."""
    config = draft.config
    g = torch.Generator().manual_seed(3)
    features = torch.randn(1, 5, config.num_target_features * config.hidden_size, generator=g)
    ids = torch.full((1, config.block_size), config.mask_token_id)
    outs = []
    for last in (1, 2):
        ids[0, -1] = last
        positions = torch.arange(5 + config.block_size).view(1, -1)
        cache = DraftContextCache(config.num_hidden_layers)
        with torch.no_grad():
            outs.append(
                draft(target.get_input_embeddings()(ids), positions[:, 5:], features, positions[:, :5], cache)
            )
    assert not torch.allclose(outs[0][0, 0], outs[1][0, 0])


@pytest.mark.parametrize(
    "layer_types,window", [(("full_attention",) * 2, None), (("sliding_attention", "full_attention"), 4)]
)
def test_incremental_context_equals_one_call(target, layer_types, window):
    """Feeding context in two chunks through the cache gives the same block output as one call."""
    draft = tiny_draft(target.config, block_size=6, layer_types=layer_types, sliding_window=window)
    config = draft.config
    g = torch.Generator().manual_seed(5)
    features = torch.randn(1, 12, config.num_target_features * config.hidden_size, generator=g)
    ids = torch.randint(0, 100, (1, 6), generator=g)
    embeds = target.get_input_embeddings()(ids)
    positions = torch.arange(18).view(1, -1)
    with torch.no_grad():
        once = draft(
            embeds,
            positions[:, 12:],
            features,
            positions[:, :12],
            DraftContextCache(config.num_hidden_layers),
        )
        cache = DraftContextCache(config.num_hidden_layers)
        draft(embeds, positions[:, 7:13], features[:, :7], positions[:, :7], cache)  # an earlier step
        assert len(cache) == 7  # only context is kept, never the block
        twice = draft(embeds, positions[:, 12:], features[:, 7:], positions[:, 7:12], cache)
    torch.testing.assert_close(once, twice)
