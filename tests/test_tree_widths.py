"""tree/budgets.py and width/acceptance_profiles.py's TreeAcceptance without a server: tree budgets
as verify widths. Best-first trees nest (a smaller budget's tree is the larger one's first nodes),
so one walk tells what every smaller budget would have accepted; the per-request means behind the
adaptive policy; the host copies a step later, with no host sync; the policy's choice of budget
under load."""

import random
from itertools import product
from types import SimpleNamespace

import pytest
import torch

from dflash_sglang.errors import DFlashConfigError
from dflash_sglang.runtime import host_sync
from dflash_sglang.tree.batch import build_batch_trees, follow_batch
from dflash_sglang.tree.budgets import accepted_within, tree_widths
from dflash_sglang.tree.verify import accept
from dflash_sglang.width import controller
from dflash_sglang.width.acceptance_profiles import TreeAcceptance, TreeAcceptanceProfile
from dflash_sglang.width.controller import VerifyWidth
from dflash_sglang.width.request_lengths import (
    LENGTHS_ENV,
    TREES_ONE_BUDGET,
    ragged_seconds,
    tree_request_lengths,
)
from dflash_sglang.width.runtime_switch import LENGTHS, refusal
from dflash_sglang.width.step_cost import StepCost
from tests.width_helpers import best_width

BS, DEPTH, VOCAB, K, WIDEST = 4, 6, 10, 3, 24


def big_trees(seed: int):
    g = torch.Generator().manual_seed(seed)
    logprobs = torch.log_softmax(torch.randn(BS, DEPTH, VOCAB, generator=g) * 2, -1)
    roots = torch.randint(VOCAB, (BS,), generator=g)
    return roots, logprobs, build_batch_trees(roots, logprobs, WIDEST - 1, K)


def path_following_predictions(tree, rng: random.Random) -> torch.Tensor:
    """Target tokens along a random root path of each request's tree, random elsewhere."""
    preds = torch.tensor([[rng.randrange(VOCAB) for _ in range(WIDEST)] for _ in range(BS)])
    for i in range(BS):
        node = rng.randrange(WIDEST)
        while node > 0:
            parent = int(tree.parents[i, node])
            preds[i, parent] = tree.tokens[i, node]
            node = parent
    return preds


def test_the_candidate_widths_are_powers_of_two_budgets_and_the_whole_tree():
    assert tree_widths(16) == [1, 2, 3, 5, 9, 16]
    assert tree_widths(17) == [1, 2, 3, 5, 9, 17]
    assert tree_widths(8) == [1, 2, 3, 5, 8]
    assert tree_widths(2) == [1, 2]


@pytest.mark.parametrize("seed", range(4))
def test_a_smaller_budget_tree_is_the_first_nodes_of_a_larger_one(seed):
    roots, logprobs, big = big_trees(seed)
    for budget in range(WIDEST):
        small = build_batch_trees(roots, logprobs, budget, K)
        n = budget + 1
        assert torch.equal(small.tokens, big.tokens[:, :n])
        assert torch.equal(small.parents, big.parents[:, :n])
        assert torch.equal(small.depths, big.depths[:, :n])


@pytest.mark.parametrize("seed", range(4))
def test_one_walk_gives_what_every_smaller_budget_would_accept(seed):
    """The counts from the widest tree's walk equal walks of the smaller trees themselves on the
    same target tokens (greedy or one draw per node: the same draws either way)."""
    roots, logprobs, big = big_trees(seed)
    rng = random.Random(seed)
    budgets = list(range(WIDEST))
    for _ in range(5):
        preds = path_following_predictions(big, rng)
        accepted, front = accept(big, preds)
        counts = accepted_within(front, accepted.lengths, torch.tensor(budgets))
        assert counts[:, -1].tolist() == (accepted.lengths - 1).tolist()
        for k, budget in enumerate(budgets):
            small = build_batch_trees(roots, logprobs, budget, K)
            walk = follow_batch(small, preds[:, : budget + 1])
            assert counts[:, k].tolist() == (walk.accept_lens - 1).tolist()
        assert counts.max() > 1  # paths went deep


def test_a_profile_learns_only_budgets_at_or_below_the_one_that_ran():
    profile = TreeAcceptanceProfile([0, 1, 2, 4, 8], prior_means=[0, 0.5, 0.75, 0.9, 1.0], prior_weight=1)
    profile.record(2, [0, 1, 2, 2, 2])  # budget 2 ran: budgets 4 and 8 learn nothing
    assert profile.steps == [1, 1, 1, 0, 0]
    means = profile.means()
    assert means[:3] == [0.0, 0.75, 1.375]
    assert means[3:] == [1.375, 1.375]  # priors below a smaller budget's mean: lifted to it
    assert profile.expected_tokens(1) == 1.0  # plain decoding: the bonus token only
    assert profile.expected_tokens(4) == 1.0 + means[2]  # width 4 holds budget 2, not 4
    assert profile.expected_tokens(9) == 1.0 + means[4]


def request(rid):
    return SimpleNamespace(rid=rid)


def test_walks_reach_each_request_a_step_later_without_a_host_sync():
    """Under the host-sync guard (inputs marked as device data) the walk's counts are copied, and
    the next step reads them: a finished copy, not a sync."""
    roots, logprobs, big = big_trees(0)
    preds = path_following_predictions(big, random.Random(0))
    stats = TreeAcceptance(tree_widths(WIDEST), DEPTH, "cpu")
    reqs = [request(f"r{i}") for i in range(BS)]
    with host_sync.DeviceDataGuard([preds]):
        accepted, front = accept(big, preds)
        stats.walked(reqs, front, accepted.lengths)
    with host_sync.DeviceDataGuard([preds]):
        profiles = stats.profiles(reqs)
    budgets = torch.tensor(stats.budgets)
    want = accepted_within(front, accepted.lengths, budgets)
    for profile, row in zip(profiles, want.tolist(), strict=True):
        assert profile.steps == [1] * len(budgets) and profile.sums == row
    assert stats.pooled.steps == [BS] * len(budgets)
    assert stats.profiles([request("new")])[0].prior_means == stats.pooled.means()


def test_load_moves_the_chosen_tree_budget():
    """A drafter that gains with every budget: at batch 1 on a flat (memory-bound) curve the
    whole tree wins; on a compute-bound curve a batch of 32 takes a small tree or none."""
    widths = tree_widths(32)
    budgets = [w - 1 for w in widths]
    means = [1.2 * b**0.5 for b in budgets]
    profile = TreeAcceptanceProfile(budgets, means, prior_weight=1)
    flat = StepCost([(1, 0.010), (4096, 0.011)])
    compute_bound = StepCost([(1, 0.010), (32, 0.010), (4096, 1.28)])
    assert best_width([profile], flat, widths) == 32
    chosen = best_width([profile] * 32, compute_bound, widths)
    brute = max(widths, key=lambda w: 32 * profile.expected_tokens(w) / compute_bound.step(32, w))
    assert chosen == brute and chosen <= 3


@pytest.fixture
def no_dp_attention(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)


def test_a_tree_server_forces_widths_up_to_its_nodes(monkeypatch, no_dp_attention):
    monkeypatch.setenv(controller.WIDTHS_ENV, "16,1,5")
    widths = VerifyWidth(8, tree_nodes=16)  # block 8, trees of 16 nodes
    assert [widths.choose(None).width for _ in range(4)] == [16, 1, 5, 16]
    monkeypatch.setenv(controller.WIDTHS_ENV, "17")
    with pytest.raises(DFlashConfigError, match="1..16"):
        VerifyWidth(8, tree_nodes=16)


def test_the_adaptive_tree_width_chooses_among_the_budgets(monkeypatch, no_dp_attention):
    monkeypatch.delenv(controller.WIDTHS_ENV, raising=False)
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    widths = VerifyWidth(8, tree_nodes=16)
    assert list(widths.candidates) == tree_widths(16) and isinstance(widths.acceptance, TreeAcceptance)
    batch = SimpleNamespace(reqs=[request("a")])
    first = []
    for _ in range(3):  # timed first: plain decoding, the whole tree, the budget nearest half
        first.append(widths.choose(batch).width)
        widths.step_done()
    assert first == [1, 16, 9]
    assert widths.times.curve() is not None and widths.choose(batch).width in tree_widths(16)


@pytest.mark.parametrize("seed", range(3))
def test_a_tree_cut_to_each_requests_length_walks_as_its_own_smaller_tree(seed):
    """Per-request lengths on trees (step/ragged.py): request i walks its first L_i nodes of the
    step's tree, which is the tree its own budget L_i - 1 would have built; the ragged mask is each
    request's n_i x n_i ancestor mask, one after another."""
    roots, logprobs, big = big_trees(seed)
    rng = random.Random(seed)
    for _ in range(4):
        lengths = torch.tensor([rng.randint(1, WIDEST) for _ in range(BS)])
        preds = path_following_predictions(big, rng)
        accepted, front = accept(big, preds, lengths)
        for i, n in enumerate(lengths.tolist()):
            small = build_batch_trees(roots[i : i + 1], logprobs[i : i + 1], n - 1, K)
            walk = follow_batch(small, preds[i : i + 1, :n])
            assert accepted.lengths[i] == walk.accept_lens[0]
            depth = int(walk.accept_lens[0])
            assert front[i, :depth].tolist() == walk.accept_index[0, :depth].tolist()
        flat = big.ragged_mask(lengths.tolist())
        want = torch.cat([big.ancestor_mask()[i, :n, :n].flatten() for i, n in enumerate(lengths.tolist())])
        assert torch.equal(flat, want)


def test_per_request_walks_teach_each_request_only_the_budgets_it_verified():
    roots, logprobs, big = big_trees(1)
    preds = path_following_predictions(big, random.Random(1))
    stats = TreeAcceptance(tree_widths(WIDEST), DEPTH, "cpu")
    reqs = [request(f"r{i}") for i in range(BS)]
    nodes = [1, 3, WIDEST, 9]
    accepted, front = accept(big, preds, torch.tensor(nodes))
    stats.walked(reqs, front, accepted.lengths, nodes)
    for req, n, profile in zip(reqs, nodes, stats.profiles(reqs), strict=True):
        assert profile.steps == [int(budget <= n - 1) for budget in stats.budgets], req.rid


def tree_rate(profiles, lengths, cost):
    tokens = sum(p.expected_tokens(n) for p, n in zip(profiles, lengths, strict=True))
    return tokens / ragged_seconds(cost, len(lengths), sum(lengths) - len(lengths), len(lengths))


@pytest.mark.parametrize("scales", [(1.2, 0.1, 0.8), (1.5, 1.5, 0.0), (0.6, 0.6, 0.6)])
def test_per_request_tree_lengths_are_the_best_of_all_lengths(scales):
    """Brute force over every vector of the policy's tree widths for 3 requests (trees of up to 9
    nodes), on a compute-bound curve where no one width suits all."""
    widths = tree_widths(9)
    budgets = [w - 1 for w in widths]
    profiles = [TreeAcceptanceProfile(budgets, [s * b**0.5 for b in budgets], prior_weight=1) for s in scales]
    cost = StepCost([(1, 0.010), (3, 0.011), (12, 0.020), (27, 0.040)])
    chosen = tree_request_lengths(profiles, cost, widths, plain_margin=0.0)
    best = max(tree_rate(profiles, lengths, cost) for lengths in product(widths, repeat=3))
    assert set(chosen.lengths) <= set(widths)
    assert tree_rate(profiles, chosen.lengths, cost) == pytest.approx(best, rel=1e-9)
    expected = [profile.expected_tokens(n) for profile, n in zip(profiles, chosen.lengths, strict=True)]
    assert chosen.tokens == pytest.approx(sum(expected))  # what the step reports it expects


def test_a_tree_server_verifies_one_budget_a_batch_unless_asked_and_on_cpu_can(monkeypatch, no_dp_attention):
    """One budget a batch by default (measured ahead of per-request budgets, TREES_ONE_BUDGET);
    `DFLASH_SGLANG_REQUEST_LENGTHS=1` or the runtime switch gives each request its own on CPU."""
    monkeypatch.setenv(controller.ADAPTIVE_ENV, "1")
    monkeypatch.delenv(LENGTHS_ENV, raising=False)
    widths = VerifyWidth(8, tree_nodes=16, ragged_off_because=None)
    assert not widths.per_request and f"one width a batch ({TREES_ONE_BUDGET})" in widths.describe
    assert refusal(LENGTHS, 1, widths) is None
    monkeypatch.setenv(LENGTHS_ENV, "1")
    widths = VerifyWidth(8, tree_nodes=16, ragged_off_because=None)
    assert widths.per_request and "per request" in widths.describe
    monkeypatch.delenv(LENGTHS_ENV)
    gpu = VerifyWidth(8, tree_nodes=16, ragged_off_because="a GPU backend's tree mask (FULL_MASK) takes one")
    assert not gpu.per_request and "one width a batch (a GPU backend's tree mask" in gpu.describe
