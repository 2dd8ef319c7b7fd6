"""The plain-PyTorch draft model: published parameter names, lossless save/load, the attention
visibility of full and sliding layers, and an incremental context cache equal to one big call."""

import pytest
import torch

from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel, attention_with_sinks, block_visibility
from dflash_sglang_tools.testing.tiny_dense import TinyShape, tiny_draft


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


def test_a_sink_is_one_more_key_with_a_zero_value():
    """attention_with_sinks: a sink of -inf takes no mass (plain SDPA); a finite one takes its
    softmax share from every key, as a key whose value is zero would."""
    q, k, v = (torch.randn(1, 2, 3, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    assert torch.allclose(attention_with_sinks(q, k, v, mask, 0.3, torch.full((2,), -torch.inf)), plain)
    sinks = torch.tensor([0.5, -1.0])
    k_sink = torch.cat([k, torch.zeros(1, 2, 1, 8)], dim=2)
    v_sink = torch.cat([v, torch.zeros(1, 2, 1, 8)], dim=2)
    scores = torch.cat([(q @ k.transpose(-1, -2)) * 0.3, sinks.view(1, 2, 1, 1).expand(1, 2, 3, 1)], dim=-1)
    want = torch.softmax(scores, -1) @ v_sink
    assert k_sink.shape[2] == 4 and torch.allclose(
        attention_with_sinks(q, k, v, mask, 0.3, sinks), want, atol=1e-6
    )


def test_the_sinks_variant_round_trips_and_its_extras_change_the_drafts(tmp_path, target):
    """MiMo's variant: the sinks load under the checkpoint's name, the config round-trips, and
    the sinks and the value scale change the drafter's output."""
    shape = TinyShape()
    draft = tiny_draft(target.config, shape, attention_sink_bias=True, attention_value_scale=0.5)
    assert draft.layers[0].self_attn.attention_sink_bias.shape == (shape.heads,)
    draft.save_pretrained(tmp_path)
    again = DFlashDraftModel.from_pretrained(tmp_path)
    assert again.config == draft.config
    assert torch.equal(
        again.layers[1].self_attn.attention_sink_bias, draft.layers[1].self_attn.attention_sink_bias
    )
    plain = tiny_draft(target.config, shape)
    plain.load_state_dict({k: v for k, v in draft.state_dict().items() if "sink" not in k})
    block, positions = torch.randn(1, 4, shape.hidden_size), torch.arange(10, 14).view(1, 4)
    context = torch.randn(1, 10, draft.fc.in_features)
    outs = [
        m(block, positions, context, torch.arange(10).view(1, 10), DraftContextCache(2))
        for m in (draft, plain)
    ]
    assert not torch.allclose(*outs)
