"""Tree verification in the reference decoder (drafter/reference.py + tree/build.py) and the tau simulator.

The keystone: under the tree mask, every node's logits equal a causal forward over its root path.
Then compaction (the cache after a step equals a causal prefill of the accepted tokens), greedy
output token-identical to the target and to the chain, a top-1 tree that is the chain, the
sampling law at temperature 1, and the simulator's tau equal to the decoder's accept lengths.
"""

import itertools
from pathlib import Path

import pytest
import torch
from scipy import stats

from dflash_sglang.drafter.reference import dflash_generate, keep_path, tree_attention_mask
from dflash_sglang.tree.build import Tree, build_tree
from dflash_sglang_tools import tree_sim
from dflash_sglang_tools.testing.tiny_dense import TinyShape, tiny_draft, tiny_target

from .conftest import prompt_of
from .test_reference import five_token_pair, target_greedy

PAIR = Path(__file__).resolve().parent.parent / "python" / "dflash_sglang" / "assets" / "tiny-pair"


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, the more so on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def verify_tree_once(target, prompt, tree: Tree):
    prefill = target(prompt, use_cache=True)
    cache, seq_len = prefill.past_key_values, prompt.shape[1]
    out = target(
        tree.tokens.view(1, -1),
        position_ids=tree.positions(seq_len).view(1, -1),
        attention_mask=tree_attention_mask(tree, seq_len, target.dtype),
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=True,
    )
    return out, cache


def path_ids(prompt, tree: Tree, node: int) -> torch.Tensor:
    return torch.cat([prompt[0], tree.tokens[tree.root_path(node)]]).view(1, -1)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@torch.no_grad()
def test_node_logits_equal_a_causal_forward_over_the_root_path(attention):
    target = tiny_target(seed=3)
    target.set_attn_implementation(attention)
    prompt = prompt_of(9, 2)
    logprobs = torch.log_softmax(torch.randn(5, 512, generator=torch.Generator().manual_seed(0)), -1)
    tree = build_tree(17, logprobs, 20, max_children=3)
    assert int(tree.depths.max()) >= 3 and int(torch.bincount(tree.parents[1:]).max()) >= 2
    out, _ = verify_tree_once(target, prompt, tree)
    for node in range(len(tree)):
        causal = target(path_ids(prompt, tree, node), output_hidden_states=True)
        torch.testing.assert_close(out.logits[0, node], causal.logits[0, -1], atol=1e-4, rtol=1e-4)
        for mine, theirs in zip(out.hidden_states, causal.hidden_states, strict=True):
            torch.testing.assert_close(mine[0, node], theirs[0, -1], atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_compaction_keeps_the_accepted_path_in_order(target):
    """After keep_path, the cache equals a causal prefill of prompt + the path's tokens, for a path
    through the second child (its slots are not a prefix of the verify block)."""
    prompt = prompt_of(7, 4)
    tokens, parents, depths = [5, 11, 12, 13, 21, 22, 31], [-1, 0, 0, 0, 2, 1, 4], [0, 1, 1, 1, 2, 2, 3]
    tree = Tree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))
    node = 6
    path = tree.root_path(node)
    assert path == [0, 2, 4, 6]
    _, cache = verify_tree_once(target, prompt, tree)
    keep_path(cache, prompt.shape[1], path)
    expected = target(path_ids(prompt, tree, node), use_cache=True).past_key_values
    for mine, theirs in zip(cache.layers, expected.layers, strict=True):
        torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values, theirs.values, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def pair():
    target, draft, tokenizer = tree_sim.load_pair(PAIR)
    prompts = tree_sim.held_out_prompt_ids(PAIR, tokenizer, 3)
    return target, draft, prompts, [tokenizer.eos_token_id]


def test_trained_pair_greedy_tree_is_the_target_and_the_chain(pair):
    """The trained tiny pair accepts 2-6 tokens a step, so trees take branches the chain cannot."""
    target, draft, prompts, stops = pair
    for ids in prompts[:2]:
        prompt = torch.tensor([ids])
        expected = target_greedy(target, prompt, 40)
        chain = dflash_generate(target, draft, prompt, 40, block_size=8)
        assert chain.tokens == expected
        for budget in (8, 16, 32):  # B, 2B, 4B
            tree = dflash_generate(target, draft, prompt, 40, block_size=8, tree_budget=budget)
            assert tree.tokens == expected
            assert sum(tree.accept_lengths) == len(tree.tokens) - 1 and max(tree.accept_lengths) <= 8
        assert tree.mean_accept_length > chain.mean_accept_length
        top1 = dflash_generate(target, draft, prompt, 40, block_size=8, tree_budget=7, tree_topk=1)
        assert top1.tokens == expected and top1.accept_lengths == chain.accept_lengths


@pytest.mark.parametrize("prompt_len,seed", [(1, 0), (23, 2)])
def test_random_pair_greedy_tree_is_the_target(target, draft, prompt_len, seed):
    prompt = prompt_of(prompt_len, seed)
    expected = target_greedy(target, prompt, 37)
    for budget in (16, 32, 64):
        out = dflash_generate(target, draft, prompt, 37, block_size=16, tree_budget=budget, tree_topk=4)
        assert out.tokens == expected


def test_top1_tree_is_the_chain_under_partial_acceptance():
    shape = TinyShape(hot_tokens=3)
    target = tiny_target(shape, seed=5)
    draft = tiny_draft(target.config, shape, seed=6, block_size=8)
    prompt = prompt_of(6, 3)
    chain = dflash_generate(target, draft, prompt, 40, block_size=8)
    top1 = dflash_generate(target, draft, prompt, 40, block_size=8, tree_budget=7, tree_topk=1)
    assert top1.tokens == chain.tokens == target_greedy(target, prompt, 40)
    assert top1.accept_lengths == chain.accept_lengths and max(chain.accept_lengths) > 1


def test_tree_sampling_matches_the_target_distribution():
    """Temperature 1 with a tree (budget 4 over a 5-token vocabulary, two draft depths): the joint
    law of the first three new tokens equals the target's own; another temperature's law fails.
    1500 runs (about 30 s here) keep the control far below its threshold."""
    target, draft = five_token_pair()
    prompt = torch.tensor([[0, 3, 1, 2]])
    g = torch.Generator().manual_seed(0)
    samples, accepts = [], []
    for _ in range(1500):
        out = dflash_generate(target, draft, prompt, 3, temperature=1.0, generator=g, tree_budget=4)
        samples.append(tuple(out.tokens))
        accepts += out.accept_lengths
    assert {1, 2} <= set(accepts)

    outcomes = list(itertools.product(range(5), repeat=3))
    with torch.no_grad():
        seqs = torch.cat([prompt.expand(125, -1), torch.tensor(outcomes)], dim=1)
        logits = target(seqs).logits[:, 3:6]
    counts = torch.tensor([samples.count(o) for o in outcomes], dtype=torch.float64)

    def p_value(temperature):
        logp = torch.log_softmax(logits.double() / temperature, -1)
        expected = logp.gather(-1, seqs[:, 4:7].unsqueeze(-1)).squeeze(-1).sum(-1).exp() * counts.sum()
        keep = expected >= 5
        observed = torch.cat([counts[keep], counts[~keep].sum().view(1)])
        expected = torch.cat([expected[keep], expected[~keep].sum().view(1)])
        return stats.chisquare(observed.numpy(), expected.numpy()).pvalue

    assert p_value(1.0) > 1e-3
    assert p_value(0.7) < 1e-6


def test_simulator_tau_equals_the_decoder(pair):
    target, draft, prompts, stops = pair
    for ids in prompts[1:3]:
        trace = tree_sim.greedy_trace(target, draft.config.target_layer_ids, ids, 40, stops)
        assert trace.tokens[len(ids) :] == target_greedy(target, torch.tensor([ids]), 40)[: trace.new_tokens]
        for budget in (None, 16, 32):
            kwargs = {} if budget is None else {"tree_budget": budget}
            out = dflash_generate(
                target, draft, torch.tensor([ids]), 40, block_size=8, stop_token_ids=stops, **kwargs
            )
            assert tree_sim.replay(target, draft, trace, 8, budget) == out.accept_lengths


def test_simulator_report(pair):
    target, draft, prompts, stops = pair
    report = tree_sim.simulate(target, draft, prompts[:1], 8, [8, 16], max_new=24, stops=stops)
    assert list(report["configs"]) == ["chain", "tree8", "tree16"]
    assert report["configs"]["tree16"]["width"] == 17 and "gain_over_chain" in report["configs"]["tree8"]
    assert [row["depth"] for row in report["rank_probe"]][:3] == [1, 2, 3]
    assert all(0 <= row["top1"] <= row["top64"] <= 1 for row in report["rank_probe"])
    assert "| tree16 | 17 |" in tree_sim.format_report(report)
