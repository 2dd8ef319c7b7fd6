"""Batched device-side trees (tree/batch.py) against the per-request heap builder and walk
(tree/build.py) and brute force: the node set, the flattened layout, the walk, the committed tokens,
the chain at max_children = 1, ties, and no host read anywhere."""

import random

import pytest
import torch

from dflash_sglang.runtime.host_sync import DeviceDataGuard
from dflash_sglang.sampling.accept import greedy_accept
from dflash_sglang.tree.batch import BatchTree, build_batch_trees, follow_batch, path_tokens
from dflash_sglang.tree.build import Tree, build_tree, follow, walk_greedy

from .test_tree import brute_force_best, paths_of

# (bs, L, V, budget, max_children)
CASES = [
    (3, 3, 5, 11, None),
    (2, 3, 4, 100, None),  # more budget than prefixes (4 + 16 + 64): padded
    (4, 5, 4, 3, None),  # budget < L
    (3, 5, 6, 8, 1),  # K = 1: the chain, padded
    (2, 6, 5, 3, 1),  # K = 1, budget < L: the chain's first 3
    (2, 4, 5, 20, 2),
    (3, 4, 3, 40, 2),
    (1, 1, 3, 5, None),  # L = 1
    (2, 3, 4, 0, None),  # no budget: the root alone
]


def random_logprobs(bs: int, depth: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(bs, depth, vocab, generator=g) * 2, dim=-1)


def real_part(tree: Tree, n: int) -> Tree:
    return Tree(tree.tokens[:n], tree.parents[:n], tree.depths[:n])


def path_scores(logprobs: torch.Tensor, tree: Tree) -> list[float]:
    """sum_d log q_d(y_d) per node, sorted."""
    return sorted(sum(float(logprobs[d, t]) for d, t in enumerate(path)) for path in paths_of(tree))


def batch_of(case, seed: int = 0) -> tuple[BatchTree, torch.Tensor, torch.Tensor]:
    bs, depth, vocab, budget, max_children = case
    roots = torch.randint(0, vocab, (bs,), generator=torch.Generator().manual_seed(seed))
    logprobs = random_logprobs(bs, depth, vocab, seed)
    return build_batch_trees(roots, logprobs, budget, max_children), roots, logprobs


@pytest.mark.parametrize("case", CASES)
def test_batched_trees_equal_the_heap_builder_and_brute_force(case):
    _, depth, _, budget, max_children = case
    batch, roots, logprobs = batch_of(case)
    assert batch.tokens.shape == batch.parents.shape == batch.depths.shape == (case[0], budget + 1)
    for i in range(case[0]):
        heap = build_tree(int(roots[i]), logprobs[i], budget, max_children)
        tree = batch.unbatch(i)
        real = real_part(tree, len(heap))
        assert batch.num_real == len(heap)
        assert set(paths_of(real)) == set(paths_of(heap))
        best, _ = brute_force_best(logprobs[i], budget, max_children)
        assert set(paths_of(real)[1:]) == best
        # No ties in continuous random scores: even the node order is the heap's pop order.
        padded = heap.padded(budget + 1)
        assert torch.equal(tree.tokens, padded.tokens) and torch.equal(tree.parents, padded.parents)
        assert torch.equal(tree.depths, padded.depths)


@pytest.mark.parametrize("case", CASES)
def test_flattened_layout(case):
    batch, roots, logprobs = batch_of(case, seed=1)
    width = min(case[3], case[2], case[4] or case[2])
    ranks = logprobs.topk(width, dim=-1).indices.tolist()  # [bs][L][K]
    seq_lens = torch.arange(case[0]) * 10 + 5
    assert torch.equal(batch.positions(seq_lens), seq_lens.unsqueeze(-1) + batch.depths)
    masks = batch.ancestor_mask()
    first_child, next_sibling = batch.retrieve_arrays()
    for i in range(case[0]):
        tree, n = batch.unbatch(i), batch.num_real
        parents, depths, tokens = tree.parents.tolist(), tree.depths.tolist(), tree.tokens.tolist()
        assert tokens[0] == int(roots[i]) and parents[0] == -1 and depths[0] == 0
        for node in range(1, n):
            assert 0 <= parents[node] < node and depths[node] == depths[parents[node]] + 1
        for node in range(n):  # children: the top ranks of their depth, distinct, in rank order
            children = [j for j in range(n) if parents[j] == node]
            child_ranks = [ranks[i][depths[node]].index(tokens[j]) for j in children]
            assert child_ranks == list(range(len(children)))
        assert all(p == -1 for p in parents[n:]) and all(d == 0 for d in depths[n:])
        assert torch.equal(masks[i], tree.ancestor_mask())
        reference = tree.retrieve_arrays()
        assert torch.equal(first_child[i], reference[0]) and torch.equal(next_sibling[i], reference[1])


def test_max_children_one_is_the_chain():
    logprobs = random_logprobs(3, 6, 9, seed=2)
    roots = torch.tensor([4, 5, 6])
    for budget in (2, 6, 10):
        batch = build_batch_trees(roots, logprobs, budget, max_children=1)
        real = min(budget, 6) + 1
        chain = torch.cat([roots.unsqueeze(-1), logprobs.argmax(-1)], dim=1)[:, :real]
        assert torch.equal(batch.tokens[:, :real], chain)
        assert torch.equal(batch.parents[:, :real], torch.arange(-1, real - 1).expand(3, -1))
        assert torch.equal(batch.depths[:, :real], torch.arange(real).expand(3, -1))


def deep_predictions(batch: BatchTree, rng: random.Random, vocab: int) -> torch.Tensor:
    """Per request: the tokens that walk to a random node of maximal depth, random elsewhere."""
    predictions = torch.randint(0, vocab, batch.tokens.shape, generator=torch.Generator().manual_seed(3))
    for i in range(batch.tokens.shape[0]):
        tree = batch.unbatch(i)
        depths = tree.depths[: batch.num_real]
        target = rng.choice((depths == depths.max()).nonzero().flatten().tolist())
        path = tree.root_path(target)
        for parent, child in zip(path, path[1:], strict=False):
            predictions[i, parent] = tree.tokens[child]
    return predictions


def children_predictions(batch: BatchTree, rng: random.Random, vocab: int) -> torch.Tensor:
    """Mostly one of the node's children's tokens, so that walks go deep but not always."""
    rows = []
    for i in range(batch.tokens.shape[0]):
        tree = batch.unbatch(i)
        children = [tree.tokens[tree.parents == j].tolist() for j in range(batch.num_nodes)]
        rows.append([rng.choice(c) if c and rng.random() < 0.7 else rng.randrange(vocab) for c in children])
    return torch.tensor(rows)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["random", "children", "deep"])
def test_follow_batch_equals_the_walk_per_request(case, kind):
    bs, depth, vocab, budget = case[:4]
    batch, _, _ = batch_of(case, seed=4)
    depth = min(depth, budget)  # a tree of `budget` nodes below the root is no deeper
    rng = random.Random(5)
    for trial in range(3):
        if kind == "random":
            g = torch.Generator().manual_seed(trial)
            predictions = torch.randint(0, vocab, batch.tokens.shape, generator=g)
        else:
            predictions = (deep_predictions if kind == "deep" else children_predictions)(batch, rng, vocab)
        accepted = follow_batch(batch, predictions)
        committed = path_tokens(batch, accepted)
        assert accepted.accept_index.shape == (bs, depth + 1) and committed.tokens.shape == (bs, depth + 1)
        for i in range(bs):
            tree = batch.unbatch(i)
            single = follow(tree, predictions[i])
            path, bonus = walk_greedy(tree, predictions[i])
            assert torch.equal(accepted.on_path[i], single.on_path)
            assert int(accepted.last[i]) == path[-1] and int(accepted.bonus[i]) == bonus
            assert accepted.accept_index[i].tolist() == path + [-1] * (depth + 1 - len(path))
            assert int(accepted.accept_lens[i]) == int(committed.lengths[i]) == len(path)
            emitted = committed.tokens[i, : len(path)].tolist()
            assert emitted == tree.tokens[path[1:]].tolist() + [bonus]
            if kind == "deep":
                assert int(tree.depths[path[-1]]) == int(tree.depths[: batch.num_real].max())


def test_a_chain_tree_commits_what_the_chain_commits():
    """K = 1 with budget >= L: the tree is the chain, so its walk must commit greedy_accept's tokens."""
    bs, depth, vocab = 6, 5, 4
    logprobs = random_logprobs(bs, depth, vocab, seed=6)
    batch = build_batch_trees(torch.tensor([1] * bs), logprobs, depth, max_children=1)
    g = torch.Generator().manual_seed(7)
    predictions = torch.where(
        torch.rand(bs, depth + 1, generator=g) < 0.8,
        torch.cat([batch.tokens[:, 1:], torch.zeros(bs, 1, dtype=torch.int64)], dim=1),
        torch.randint(0, vocab, (bs, depth + 1), generator=g),
    )
    committed = path_tokens(batch, follow_batch(batch, predictions))
    chain = greedy_accept(batch.tokens[:, 1:], predictions)
    assert torch.equal(committed.lengths, chain.lengths)
    for i in range(bs):
        n = int(chain.lengths[i])
        assert torch.equal(committed.tokens[i, :n], chain.tokens[i, :n])


def test_exact_ties_still_give_a_valid_tree():
    """A sure drafter has log q = 0 exactly (child and parent tie) and -inf for masked tokens."""
    logits = torch.full((2, 4, 6), -1e4)
    logits[:, :, 2] = 100.0
    logits[1, :, 3] = 100.0  # two equally sure tokens per depth
    logits[:, :, 5] = float("-inf")
    logprobs = torch.log_softmax(logits, dim=-1)
    assert (logprobs.amax(-1)[0] == 0).all()
    batch = build_batch_trees(torch.tensor([0, 0]), logprobs, 12, None)
    for i in range(2):
        tree = batch.unbatch(i)
        heap = build_tree(0, logprobs[i], 12)
        parents = tree.parents.tolist()
        assert all(0 <= parents[j] < j for j in range(1, batch.num_real))
        assert all(tree.depths[j] == tree.depths[parents[j]] + 1 for j in range(1, batch.num_real))
        # As good as the heap's tree, whichever tie it broke.
        assert path_scores(logprobs[i], real_part(tree, len(heap))) == path_scores(logprobs[i], heap)


def test_nothing_is_read_to_the_host():
    """The whole step under host_sync's guard: building, masks, links, walk and commit."""
    case = (3, 4, 6, 10, 3)
    _, roots, logprobs = batch_of(case)
    predictions = torch.randint(0, 6, (3, 11), generator=torch.Generator().manual_seed(8))
    seq_lens = torch.tensor([5, 9, 2])
    with DeviceDataGuard([roots, logprobs, predictions, seq_lens]):
        batch = build_batch_trees(roots, logprobs, 10, 3)
        batch.positions(seq_lens)
        batch.ancestor_mask()
        batch.retrieve_arrays()
        path_tokens(batch, follow_batch(batch, predictions))
