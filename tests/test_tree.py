"""Draft trees (tree/build.py) against brute force: the builder, the flattened layout, the greedy walk,
and the sampled acceptance's output law (chi-square, with a negative control that must fail)."""

import itertools
import random

import pytest
import torch
from scipy import stats

from dflash_sglang.tree.build import (
    Tree,
    accept_sampled,
    build_tree,
    build_trees,
    follow,
    sample_nodes,
    walk_greedy,
)


def random_logprobs(depth: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(depth, vocab, generator=g) * 2, dim=-1)


def paths_of(tree: Tree) -> list[tuple[int, ...]]:
    """Each node's draft tokens from the root down (the root's own token excluded)."""
    return [tuple(tree.tokens[tree.root_path(i)[1:]].tolist()) for i in range(len(tree))]


def brute_force_best(logprobs: torch.Tensor, budget: int, max_children: int | None):
    """All prefixes whose tokens rank below max_children at their depth, the best `budget` by score."""
    depth_cap, vocab = logprobs.shape
    allowed = logprobs.topk(min(max_children or vocab, vocab), dim=-1).indices.tolist()
    scored = []
    for length in range(1, depth_cap + 1):
        for prefix in itertools.product(*allowed[:length]):
            scored.append((sum(float(logprobs[d, t]) for d, t in enumerate(prefix)), prefix))
    scored.sort(reverse=True)
    return {prefix for _, prefix in scored[:budget]}, len(scored)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("budget", [1, 4, 11, 40, 500])
@pytest.mark.parametrize("max_children", [None, 1, 2])
def test_builder_picks_the_most_probable_prefixes(seed, budget, max_children):
    logprobs = random_logprobs(3, 5, seed)
    tree = build_tree(7, logprobs, budget, max_children)
    best, available = brute_force_best(logprobs, budget, max_children)
    paths = paths_of(tree)
    assert paths[0] == () and tree.tokens[0] == 7
    assert set(paths[1:]) == best and len(tree) == min(budget, available) + 1
    assert all(path[:-1] in paths for path in paths[1:])  # prefix-closed
    scores = [sum(float(logprobs[d, t]) for d, t in enumerate(p)) for p in paths[1:]]
    assert all(a >= b for a, b in itertools.pairwise(scores))  # best first
    assert int(tree.depths.max()) <= 3
    children = torch.bincount(tree.parents[1:], minlength=len(tree))
    assert int(children.max()) <= (max_children or 5)


def test_the_optimal_tree_can_leave_out_the_chain():
    """A flat q_1 makes depth-1 siblings beat the deep top-1 spine at a small budget."""
    logprobs = torch.log(torch.tensor([[0.3, 0.3, 0.3, 0.1], [0.5, 0.2, 0.2, 0.1], [0.5, 0.2, 0.2, 0.1]]))
    tree = build_tree(0, logprobs, 3)
    assert sorted(paths_of(tree)[1:]) == [(0,), (1,), (2,)]  # no depth 2, though the chain reaches 3
    assert build_tree(0, logprobs, 3, max_children=1).depths.tolist() == [0, 1, 2, 3]  # top-1: the chain


def random_tree(rng: random.Random) -> Tree:
    """Either a DDTree from random draft log-probs, or arbitrary parents (parent < child) with
    distinct tokens among siblings, as every tree the builder makes has."""
    if rng.random() < 0.5:
        logprobs = random_logprobs(rng.randint(1, 6), rng.randint(2, 9), rng.randrange(10**6))
        return build_tree(rng.randrange(9), logprobs, rng.randint(0, 40), rng.choice([None, 1, 2, 3]))
    n = rng.randint(1, 30)
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    depths, tokens = [0] * n, [rng.randrange(40)] + [0] * (n - 1)
    for i in range(1, n):
        depths[i] = depths[parents[i]] + 1
        siblings = {tokens[j] for j in range(1, i) if parents[j] == parents[i]}
        tokens[i] = rng.choice([t for t in range(40) if t not in siblings])
    return Tree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))


def test_flattened_layout_invariants_on_random_trees():
    rng = random.Random(0)
    for _ in range(200):
        tree = random_tree(rng)
        n, parents = len(tree), tree.parents.tolist()
        assert parents[0] == -1 and all(0 <= parents[i] < i for i in range(1, n))
        assert all(tree.depths[i] == tree.depths[parents[i]] + 1 for i in range(1, n))
        assert torch.equal(tree.positions(17), 17 + tree.depths)
        # The mask is the transitive closure of the parent map (plus the diagonal).
        closure = torch.zeros(n, n, dtype=torch.bool)
        for i in range(n):
            closure[i, tree.root_path(i)] = True
        assert torch.equal(tree.ancestor_mask(), closure)
        # The left-child right-sibling links list exactly each node's children, in node order.
        first_child, next_sibling = (links.tolist() for links in tree.retrieve_arrays())
        for node in range(n):
            listed, child = [], first_child[node]
            while child != -1:
                listed.append(child)
                child = next_sibling[child]
            assert listed == [j for j in range(n) if parents[j] == node]


def test_padding_adds_isolated_nodes():
    tree = build_tree(3, random_logprobs(4, 6, 1), 9)
    padded = tree.padded(16)
    n = len(tree)
    assert len(padded) == 16 and padded.num_real == n
    mask = padded.ancestor_mask()
    assert torch.equal(mask[:n, :n], tree.ancestor_mask())
    assert (
        not mask[n:, :n].any()
        and not mask[:n, n:].any()
        and torch.equal(mask[n:, n:], torch.eye(16 - n).bool())
    )
    for links, padded_links in zip(tree.retrieve_arrays(), padded.retrieve_arrays(), strict=True):
        assert torch.equal(padded_links[:n], links) and (padded_links[n:] == -1).all()
    # Predictions include 0, the pad token: pad nodes still never match.
    predictions = torch.randint(0, 6, (500, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(follow(padded, predictions).last, follow(tree, predictions[:, :n]).last)


def brute_force_walk(tree: Tree, predictions: list[int]) -> tuple[list[int], int]:
    """Over every root path, the longest prefix in which each node's token is its parent's prediction."""
    best: list[int] = [0]
    for leaf in range(len(tree)):
        path = tree.root_path(leaf)
        k = 1
        while k < len(path) and int(tree.tokens[path[k]]) == predictions[path[k - 1]]:
            k += 1
        best = max(best, path[:k], key=len)
    return best, predictions[best[-1]]


def lcrs_walk(tree: Tree, predictions: list[int]) -> list[int]:
    """The walk as SGLang's verify_tree_greedy does it, over retrieve_next_token/next_sibling."""
    first_child, next_sibling = (links.tolist() for links in tree.retrieve_arrays())
    path = [0]
    child = first_child[0]
    while child != -1:
        if int(tree.tokens[child]) == predictions[path[-1]]:
            path.append(child)
            child = first_child[child]
        else:
            child = next_sibling[child]
    return path


def test_greedy_walk_equals_brute_force():
    rng = random.Random(1)
    for _ in range(300):
        tree = random_tree(rng)
        # Mostly one of the node's children's tokens, so that walks go deep.
        children = [tree.tokens[tree.parents == i].tolist() for i in range(len(tree))]
        predictions = [rng.choice(c) if c and rng.random() < 0.8 else rng.randrange(40) for c in children]
        path, bonus = walk_greedy(tree, torch.tensor(predictions))
        assert (path, bonus) == brute_force_walk(tree, predictions)
        assert path == lcrs_walk(tree, predictions)


def test_build_trees_is_one_tree_per_request():
    logprobs = torch.stack([random_logprobs(3, 6, s) for s in range(3)])
    trees = build_trees(torch.tensor([1, 2, 3]), logprobs, 5, 2)
    for root, lp, tree in zip([1, 2, 3], logprobs, trees, strict=True):
        assert torch.equal(tree.tokens, build_tree(root, lp, 5, 2).tokens)


def test_point_mass_targets_walk_their_own_path():
    tree = Tree(torch.tensor([0, 1, 2, 3]), torch.tensor([-1, 0, 0, 2]), torch.tensor([0, 1, 1, 2]))
    probs = torch.nn.functional.one_hot(torch.tensor([2, 0, 3, 4]), 5).float()
    assert accept_sampled(tree, probs, torch.Generator().manual_seed(0)) == ([0, 2, 3], 4)


# ---- the sampled acceptance's output law ------------------------------------------------------------

VOCAB = 6


def synthetic_target(seed: int = 0):
    """p(. | last token t, g tokens generated) = softmax(A[t] + g * b): known for every prefix."""
    g = torch.Generator().manual_seed(seed)
    table, drift = torch.randn(VOCAB, VOCAB, generator=g) * 1.5, torch.randn(VOCAB, generator=g)
    return lambda last, generated: torch.softmax(table[last] + generated.unsqueeze(-1) * drift, dim=-1)


def first_two_tokens(
    tree: Tree, predictions: torch.Tensor, p, generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first two emitted tokens per run: from this step, and when it emitted only one, from
    the next step (whose first token is a sample at its root, whatever its tree)."""
    accepted = follow(tree, predictions)
    at = [accepted.on_path & (tree.depths == d) for d in (1, 2)]
    has1, has2 = (mask.any(-1) for mask in at)
    node1, node2 = (mask.float().argmax(-1) for mask in at)
    first = torch.where(has1, tree.tokens[node1], accepted.bonus)
    next_step = sample_nodes(p(first, torch.ones_like(first)), generator)
    second = torch.where(has2, tree.tokens[node2], torch.where(has1, accepted.bonus, next_step))
    return first, second


def test_sampled_acceptance_emits_the_target_law():
    """1e5 runs over one tree with high- and low-p children, deep and shallow leaves: the joint law
    of the first two tokens is exactly p(x1) p(x2 | x1). A rule that always accepts the target's
    argmax child when it has one (a classic shortcut) must fail the same test."""
    p = synthetic_target()
    root_probs = p(torch.tensor(0), torch.tensor(0))
    order = root_probs.argsort(descending=True).tolist()
    best_next = int(p(torch.tensor(order[0]), torch.tensor(1)).argmax())
    tokens = [0, order[0], order[-1], order[2], best_next, (best_next + 1) % VOCAB, 0, order[0]]
    parents = [-1, 0, 0, 0, 1, 1, 4, 2]
    depths = [0, 1, 1, 1, 2, 2, 3, 2]
    tree = Tree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths))
    node_probs = p(tree.tokens, tree.depths)  # a node's last token and how many tokens it stands after
    runs, g = 100_000, torch.Generator().manual_seed(0)
    samples = sample_nodes(node_probs.expand(runs, -1, -1), g)

    law = (root_probs.unsqueeze(1) * p(torch.arange(VOCAB), torch.ones(VOCAB))).double()  # [x1, x2]
    law /= law.sum()  # float32 rounding; chisquare wants equal totals

    def p_value(first, second):
        counts = torch.bincount(first * VOCAB + second, minlength=VOCAB * VOCAB).double()
        expected = law.flatten() * runs
        keep = expected >= 5  # pool the rare outcomes into one cell
        observed = torch.cat([counts[keep], counts[~keep].sum().view(1)])
        expected = torch.cat([expected[keep], expected[~keep].sum().view(1)])
        observed, expected = observed[expected > 0], expected[expected > 0]
        return stats.chisquare(observed.numpy(), expected.numpy()).pvalue

    first, second = first_two_tokens(tree, samples, p, g)
    depth = tree.depths[follow(tree, samples).last]
    assert {0, 1, 2, 3} <= set(depth.tolist())  # every depth is reached
    assert p_value(first, second) > 1e-3

    argmax = node_probs.argmax(-1)
    argmax_is_child = torch.tensor([argmax[i] in tree.tokens[tree.parents == i] for i in range(len(tree))])
    biased = torch.where(argmax_is_child, argmax, samples)
    assert p_value(*first_two_tokens(tree, biased, p, g)) < 1e-6
