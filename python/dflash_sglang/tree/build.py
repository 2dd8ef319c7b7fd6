"""Draft trees for DFlash (DDTree, arXiv 2604.12989): build, flatten, walk, accept. Pure torch.

One drafter pass gives per-position log-probabilities log q_1 .. log q_L over the block's mask
positions (L = B - 1). Position d does not see the tokens chosen before it, so the drafter defines
the factorised surrogate Q(y) = prod_d q_d(y_d), under which a prefix-closed tree T accepts
sum_{u in T} Q(u) tokens on average. The `budget` most probable prefixes maximise that sum and
are prefix-closed by themselves; `build_tree` finds them best-first with a heap (Algorithm 1).

That tree is optimal for the surrogate, not for the target, and it need not contain the chain
(the top-1 token at every depth): at a small budget a second-ranked token at depth 1 can beat the
chain's deep end. A `spine` builder (chain first, branches after) would guarantee tree >= chain.

Flattened layout (what the target verifies): node 0 is the root, the last verified token, not a
draft; nodes 1..n follow pop order, so parent[i] < i, and a node's children appear in rank order.
Node i sits at position seq_len + depth[i] and attends to the committed prefix, its ancestors and
itself (`ancestor_mask`).

Acceptance at temperature 0 descends from the root to the child whose token is the target's
argmax at the current node; at temperature > 0 to the child whose token equals a sample of the
target at the current node. Either way the token emitted at the stop node (the bonus) is the
target's own choice there, so every emitted token is exactly the target's (DDTree section 4.4).
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import NamedTuple

import torch


@dataclasses.dataclass(frozen=True)
class Tree:
    tokens: torch.Tensor  # [N] int64; tokens[0] is the root (the last verified token)
    parents: torch.Tensor  # [N] int64; parents[0] = -1, parents[i] < i
    depths: torch.Tensor  # [N] int64; depths[0] = 0, depth[i] = depth[parent[i]] + 1
    # Padding nodes (see `padded`) are isolated: no parent, no children, never accepted.
    num_real: int | None = None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def positions(self, seq_len: int) -> torch.Tensor:
        """Positions for RoPE: the root at `seq_len`, a node at depth d at `seq_len + d`."""
        return seq_len + self.depths

    def ancestor_mask(self) -> torch.Tensor:
        """[N, N] bool: row i is True at i's ancestors and at i itself (the tree attention mask)."""
        n = len(self)
        mask = torch.eye(n, dtype=torch.bool, device=self.tokens.device)
        rows = torch.arange(n, device=self.tokens.device)
        above = self.parents.clone()
        while bool((above >= 0).any()):
            has = above >= 0
            mask[rows[has], above[has]] = True
            above = torch.where(has, self.parents[above.clamp_min(0)], above)
        return mask

    def retrieve_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """SGLang's left-child right-sibling links (-1 = none): `retrieve_next_token[i]` is i's first
        child, `retrieve_next_sibling[i]` the next child of i's parent, both in node order."""
        parents = self.parents.tolist()
        first_child = [-1] * len(parents)
        next_sibling = [-1] * len(parents)
        for node in range(len(parents) - 1, 0, -1):  # backwards, so each list ends up in node order
            parent = parents[node]
            if parent >= 0:
                next_sibling[node], first_child[parent] = first_child[parent], node
        as_tensor = lambda links: torch.tensor(links, dtype=torch.int64, device=self.tokens.device)  # noqa: E731
        return as_tensor(first_child), as_tensor(next_sibling)

    def root_path(self, node: int) -> list[int]:
        """Node ids from the root down to `node`."""
        path = [node]
        while path[-1] > 0:
            path.append(int(self.parents[path[-1]]))
        return path[::-1]

    def padded(self, size: int, pad_token: int = 0) -> Tree:
        """The tree with isolated nodes appended up to `size` nodes (a fixed verify width, as CUDA
        graphs want). A pad node has parent -1 and depth 0: it sees only itself, no real node sees
        it, it has no retrieve links, and no walk reaches it; its K/V slot is simply dropped."""
        extra = size - len(self)
        if extra < 0:
            raise ValueError(f"cannot pad a tree of {len(self)} nodes to {size}")
        fill = lambda value: self.tokens.new_full((extra,), value)  # noqa: E731
        return Tree(
            torch.cat([self.tokens, fill(pad_token)]),
            torch.cat([self.parents, fill(-1)]),
            torch.cat([self.depths, fill(0)]),
            num_real=self.num_real or len(self),
        )


def build_tree(
    root_token: int, draft_logprobs: torch.Tensor, budget: int, max_children: int | None = None
) -> Tree:
    """DDTree's Algorithm 1: the `budget` most probable prefixes under prod_d q_d, best first.

    draft_logprobs: [L, V] log q_d per mask position (log_softmax of the untempered draft logits).
    Depth is capped at L; `max_children` (SGLang's --speculative-eagle-topk) caps the children of
    any node at the K most probable tokens of their depth. A candidate is a rank tuple
    (r_1 .. r_d); popping it pushes at most its next sibling (r_d + 1) and its first child (rank 0
    at depth d + 1), whose scores are never higher, so pops come out in non-increasing order and
    every popped prefix's parent was popped before it. The result has min(budget, #prefixes) + 1
    nodes, the root included.
    """
    depth_cap, vocab = draft_logprobs.shape
    width = min(budget, vocab, max_children or vocab)
    top_logprobs, top_tokens = draft_logprobs.float().topk(width, dim=-1)
    logq, ids = top_logprobs.tolist(), top_tokens.tolist()

    tokens, parents, depths = [root_token], [-1], [0]
    # Entries: (-score, depth, rank, parent node); ties resolve to the shallower, lower-ranked one.
    heap = [(-logq[0][0], 1, 0, 0)] if depth_cap > 0 and budget > 0 else []
    while heap and len(tokens) <= budget:
        neg_score, depth, rank, parent = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(ids[depth - 1][rank])
        parents.append(parent)
        depths.append(depth)
        if rank + 1 < width:  # the next sibling: swap this rank's log-prob for the next one's
            sibling = neg_score + logq[depth - 1][rank] - logq[depth - 1][rank + 1]
            heapq.heappush(heap, (sibling, depth, rank + 1, parent))
        if depth < depth_cap:  # the first child: extend by the best token one level deeper
            heapq.heappush(heap, (neg_score - logq[depth][0], depth + 1, 0, node))

    device = draft_logprobs.device
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int64, device=device)  # noqa: E731
    return Tree(as_tensor(tokens), as_tensor(parents), as_tensor(depths))


def build_trees(
    root_tokens: torch.Tensor, draft_logprobs: torch.Tensor, budget: int, max_children: int | None = None
) -> list[Tree]:
    """One tree per request: root_tokens [bs], draft_logprobs [bs, L, V]."""
    roots = root_tokens.tolist()
    return [build_tree(r, lp, budget, max_children) for r, lp in zip(roots, draft_logprobs, strict=True)]


class TreeAcceptance(NamedTuple):
    """One walk per row of a batch of target predictions over the same tree."""

    on_path: torch.Tensor  # [..., N] bool: the accepted nodes, the root included
    last: torch.Tensor  # [...] the deepest accepted node
    bonus: torch.Tensor  # [...] the target's token at `last`: emitted after the accepted drafts


def follow(tree: Tree, predictions: torch.Tensor) -> TreeAcceptance:
    """The longest root path whose every node carries the target's prediction at its parent.

    predictions: [..., N] the target's token at each node (argmax, or one sample per node). A node
    is accepted iff every node on its root path (root excepted) matched; children of one node hold
    distinct tokens, so the accepted nodes form a single path. Vectorised: no host loop.
    """
    parents = tree.parents.clamp_min(0)
    matched = tree.tokens == predictions.gather(-1, parents.expand_as(predictions))
    matched = matched & (tree.parents >= 0)
    matched[..., 0] = True
    misses = (~matched).float() @ tree.ancestor_mask().float().T  # per node: misses on its root path
    on_path = misses == 0
    last = (on_path * (tree.depths + 1)).argmax(-1)  # depth + 1: the root wins over unaccepted nodes
    bonus = predictions.gather(-1, last.unsqueeze(-1)).squeeze(-1)
    return TreeAcceptance(on_path, last, bonus)


def accepted_path(tree: Tree, acceptance: TreeAcceptance) -> list[int]:
    """Node ids of an unbatched acceptance, root first, in depth order."""
    return tree.root_path(int(acceptance.last))


def walk_greedy(tree: Tree, target_argmax: torch.Tensor) -> tuple[list[int], int]:
    """Temperature 0: (accepted node ids from the root, bonus token) for the target's argmax [N]."""
    acceptance = follow(tree, target_argmax)
    return accepted_path(tree, acceptance), int(acceptance.bonus)


def sample_nodes(target_probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One independent target sample per node: [..., N, V] probabilities -> [..., N] tokens."""
    flat = target_probs.reshape(-1, target_probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).view(target_probs.shape[:-1])


def accept_sampled(
    tree: Tree, target_probs: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[list[int], int]:
    """Temperature > 0, exact for deterministic children (the target-only rule).

    At the current node draw x ~ p(. | node); if x is a child's token descend, else emit x as the
    bonus and stop. Drawing every node's x up front changes nothing (a walk reads each node's draw
    at most once), and each emitted token is a fresh sample of the target given the emitted prefix.
    The draft q never enters: accepting a child set S with probability p(S) is the best any exact
    rule can do.
    """
    return walk_greedy(tree, sample_nodes(target_probs, generator))
