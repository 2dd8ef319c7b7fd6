"""The worker's tree step pieces (tree/verify.py) on CPU: the walk in the chain's layout, and the
move of the accepted path's KV, logits and features to the front of the block, in a real SGLang KV
pool (the native move the CPU layer selects)."""

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

import dflash_sglang.cpu  # noqa: F401  (the CPU pool's native KV move)
from dflash_sglang.cpu.kernels.kv_pool import native_kv_move_on_cpu
from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.sampling.target_law import draw_every_row as predictions
from dflash_sglang.tree import build as tree
from dflash_sglang.tree.batch import build_batch_trees
from dflash_sglang.tree.verify import accept, move_path_to_front

BS, DEPTH, VOCAB, BUDGET, K = 3, 5, 12, 9, 3
N = BUDGET + 1


def random_trees(seed: int):
    g = torch.Generator().manual_seed(seed)
    logprobs = torch.log_softmax(torch.randn(BS, DEPTH, VOCAB, generator=g) * 2, -1)
    roots = torch.randint(VOCAB, (BS,), generator=g)
    return build_batch_trees(roots, logprobs, BUDGET, K), g


def deep_predictions(batch_tree, g):
    """Target tokens that follow some random root path of each tree, then disagree."""
    preds = torch.randint(VOCAB, (BS, N), generator=g)
    for i in range(BS):
        one = batch_tree.unbatch(i)
        node = int(torch.randint(N, (1,), generator=g))
        path = one.root_path(node)
        for parent, child in zip(path, path[1:], strict=False):
            preds[i, parent] = one.tokens[child]
    return preds


def test_accept_emits_the_walk_in_the_chain_layout():
    for seed in range(5):
        batch_tree, g = random_trees(seed)
        preds = deep_predictions(batch_tree, g)
        accepted, front = accept(batch_tree, preds)
        assert accepted.tokens.shape == (BS, N)
        for i in range(BS):
            one = batch_tree.unbatch(i)
            path, bonus = tree.walk_greedy(one, preds[i])
            length = int(accepted.lengths[i])
            assert length == len(path)
            assert accepted.tokens[i, :length].tolist() == [*one.tokens[path[1:]].tolist(), bonus]
            assert front[i, :length].tolist() == path
            assert front[i, length:].tolist() == list(range(length, N))  # past the path: in place


def test_moving_the_path_to_the_front_moves_its_kv_logits_and_features():
    batch_tree, g = random_trees(7)
    accepted, front = accept(batch_tree, deep_predictions(batch_tree, g))
    pool = MHATokenToKVPool(
        size=64, page_size=1, dtype=torch.float32, head_num=2, head_dim=4, layer_num=2,
        device="cpu", enable_memory_saver=False,
    )  # fmt: skip
    native_kv_move_on_cpu(lambda *a, **k: None, pool)
    for buffer in (*pool.k_buffer, *pool.v_buffer):
        buffer.copy_(torch.randn(buffer.shape, generator=g))
    k_before = [b.clone() for b in pool.k_buffer]
    v_before = [b.clone() for b in pool.v_buffer]
    cache_loc = (torch.randperm(63, generator=g)[: BS * N] + 1).long()  # scattered slots
    out = SimpleNamespace(
        next_token_logits=torch.randn(BS * N, VOCAB, generator=g),
        hidden_states=torch.randn(BS * N, 6, generator=g),
    )
    logits, hidden = out.next_token_logits.clone(), out.hidden_states.clone()
    move_path_to_front(front, cache_loc, pool, out)
    slots = cache_loc.view(BS, N)
    for i in range(BS):
        for j in range(int(accepted.lengths[i])):
            src_node = int(front[i, j])
            for layer in range(2):
                torch.testing.assert_close(
                    pool.k_buffer[layer][slots[i, j]], k_before[layer][slots[i, src_node]]
                )
                torch.testing.assert_close(
                    pool.v_buffer[layer][slots[i, j]], v_before[layer][slots[i, src_node]]
                )
            torch.testing.assert_close(out.next_token_logits[i * N + j], logits[i * N + src_node])
            torch.testing.assert_close(out.hidden_states[i * N + j], hidden[i * N + src_node])


def test_greedy_predictions_are_the_argmax_per_node():
    logits = torch.randn(BS * N, VOCAB)
    greedy = SimpleNamespace(is_all_greedy=True)
    assert torch.equal(predictions(logits, greedy, N, None), logits.argmax(-1).view(BS, N))
    assert torch.equal(predictions(logits, None, N, None), logits.argmax(-1).view(BS, N))


def startup(**overrides):
    """refuse_unsupported_setups on server args as SGLang resolves them (CPU, torch_native)."""
    from dflash_sglang.tree.switches import TreeSettings
    from dflash_sglang.tree.verify import refuse_unsupported_setups

    args = dict(device="cpu", enable_dp_attention=False, speculative_draft_window_size=None,
                disaggregation_mode="null", attention_backend="torch_native",
                prefill_attention_backend=None, decode_attention_backend=None)  # fmt: skip
    args.update(overrides)
    return refuse_unsupported_setups(TreeSettings(4, 16), 8, SimpleNamespace(**args))


@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"enable_dp_attention": True}, "--enable-dp-attention"),
        ({"speculative_draft_window_size": 12}, "--speculative-draft-window-size"),
        ({"disaggregation_mode": "decode"}, "--disaggregation-mode"),
        ({"device": "cuda", "attention_backend": "fa3"}, "--attention-backend fa3"),
        ({"device": "cuda", "attention_backend": "trtllm_mha"}, "--attention-backend trtllm_mha"),
        ({"device": "cuda", "attention_backend": "triton", "decode_attention_backend": "fa3"}, "fa3"),
    ],
)
def test_setups_a_tree_does_not_serve_fail_at_startup_naming_the_option(overrides, named):
    with pytest.raises(DFlashConfigError, match="--speculative-eagle-topk 4") as refused:
        startup(**overrides)
    assert named in str(refused.value)


@pytest.mark.parametrize("backend", ["triton", "flashinfer"])
def test_gpu_backends_that_read_the_custom_mask_pass_the_startup_checks(backend):
    """Only the refusal is checked here: serving a tree on these backends needs a GPU."""
    assert startup(device="cuda", attention_backend=backend) is None


def test_the_verify_input_carries_the_devices_mask_layout_and_the_links():
    """QLEN_ONLY on CPU (SGLang's CPU kernels); FULL_MASK elsewhere: request after request, N rows
    of prefix + N cells (test_tree_kernels checks the cells against SGLang's own builder)."""
    from dflash_sglang.tree.verify import attach

    trees, _ = random_trees(3)
    seq_lens = torch.tensor([4, 0, 7])
    verify_input = SimpleNamespace()
    attach(verify_input, trees, seq_lens, 11)
    assert torch.equal(verify_input.custom_mask, trees.ancestor_mask().flatten())
    assert torch.equal(verify_input.positions, (seq_lens.unsqueeze(1) + trees.depths).flatten())
    assert torch.equal(verify_input.retrieve_next_token, trees.retrieve_arrays()[0])
    assert torch.equal(verify_input.retrieve_next_sibling, trees.retrieve_arrays()[1])
    full = trees.full_mask(seq_lens, 11 + 5)  # a host bound above sum(seq_lens): spare cells stay True
    assert full.numel() == 16 * N + BS * N * N and full[11 * N + BS * N * N :].all()
    rows = torch.split(full[: 11 * N + BS * N * N], (N * (seq_lens + N)).tolist())
    for i, row in enumerate(rows):
        grid = row.view(N, int(seq_lens[i]) + N)
        assert grid[:, : int(seq_lens[i])].all()
        assert torch.equal(grid[:, int(seq_lens[i]) :], trees.ancestor_mask()[i])
