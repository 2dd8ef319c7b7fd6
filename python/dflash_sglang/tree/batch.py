"""Draft trees for a whole batch on the device: fixed shapes, no host reads, no loop over requests.

The same tree as tree.build_tree (DDTree's `budget` most probable prefixes under prod_d q_d, depth
<= L, children the top-K tokens of their depth), found by beam search instead of a heap, so that
the overlap worker can build it inside a step. A prefix among the global best `budget` is among
the best `budget` of its own depth, and so is its parent one depth up (a parent scores at least
as well as its child, and B better parents give B better first children). So a beam of `budget`
prefixes per depth, extended by the K best tokens of the next position, holds the whole tree;
the tree is the best `budget` over all the beams.

Every width here (beam sizes, node count N = budget + 1) follows from budget, K and L alone, so
shapes never depend on data. Node order is the heap's pop order: by score, ties to the shallower
prefix (a stable sort over beams concatenated by depth), so parent[i] < i even where a log q is
exactly 0, and siblings appear in rank order. When fewer than `budget` prefixes exist, the tail is
padded with isolated nodes as Tree.padded does (parent -1, depth 0, never accepted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import torch

from ..sampling.accept import Acceptance
from .build import Tree


@dataclasses.dataclass(frozen=True)
class BatchTree:
    tokens: torch.Tensor  # [bs, N] int64; column 0 holds the roots
    parents: torch.Tensor  # [bs, N] int64; -1 at the root and at padding, else parent[i] < i
    depths: torch.Tensor  # [bs, N] int64; 0 at the root and at padding
    max_depth: int  # L: no node is deeper (bounds the parent jumps below)
    num_real: int  # nodes before the padding, the root included; the same for every request

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[1]

    def positions(self, seq_lens: torch.Tensor) -> torch.Tensor:
        """[bs, N] positions for RoPE: a node at depth d sits at seq_len + d."""
        return seq_lens.unsqueeze(-1) + self.depths

    def ancestor_mask(self) -> torch.Tensor:
        """[bs, N, N] bool: row i is True at i's ancestors and at i itself (the tree attention mask)."""
        n = self.num_nodes
        columns = torch.arange(n, device=self.tokens.device)
        mask = (columns.unsqueeze(-1) == columns).expand(self.tokens.shape[0], n, n)
        above = self.parents
        for _ in range(self.max_depth):  # one parent jump per level: -1 stays -1 and marks nothing
            mask = mask | (above.unsqueeze(-1) == columns)
            above = torch.where(above >= 0, self.parents.gather(1, above.clamp_min(0)), above)
        return mask

    def full_mask(self, seq_lens: torch.Tensor, prefix_bound: int) -> torch.Tensor:
        """SGLang's FULL_MASK layout (its GPU backends'): request after request, N rows of
        seq_len + N allowed keys, the prefix then the nodes, flattened. Cells past the requests'
        rows (when `prefix_bound` > sum(seq_lens)) stay True and are never read."""
        bs, n = self.tokens.shape
        row_len = seq_lens.to(torch.int64) + n
        starts = torch.cumsum(row_len * n, 0) - row_len * n
        nodes = torch.arange(n, device=self.tokens.device)
        cells = (starts.view(bs, 1, 1) + nodes.view(1, n, 1) * row_len.view(bs, 1, 1)
                 + seq_lens.view(bs, 1, 1) + nodes.view(1, 1, n))  # fmt: skip
        mask = torch.ones(prefix_bound * n + n * n * bs, dtype=torch.bool, device=self.tokens.device)
        mask[cells.flatten()] = self.ancestor_mask().flatten()
        return mask

    def retrieve_arrays(self) -> tuple[torch.Tensor, torch.Tensor]:
        """SGLang's left-child right-sibling links, [bs, N] each (-1 = none), as Tree.retrieve_arrays:
        the first child of i, and the next node after i with i's parent."""
        n = self.num_nodes
        nodes = torch.arange(n, device=self.tokens.device)
        later = nodes.unsqueeze(-1) < nodes  # [i, j]: j comes after i
        is_child = self.parents.unsqueeze(1) == nodes.unsqueeze(-1)  # [b, i, j]: j's parent is i
        same_parent = (self.parents.unsqueeze(-1) == self.parents.unsqueeze(1)) & (
            self.parents >= 0
        ).unsqueeze(-1)
        return _first_true(is_child), _first_true(same_parent & later)

    def truncated(self, lengths: torch.Tensor) -> BatchTree:
        """Request i's tree cut to its first lengths[i] nodes (per-request lengths, step/ragged.py):
        the nodes after them become padding (no parent, depth 0), so the walk never reaches them.
        The first nodes of a best-first tree are the smaller budget's tree, ancestors included."""
        nodes = torch.arange(self.num_nodes, device=self.tokens.device)
        kept = nodes < lengths.unsqueeze(1)
        return dataclasses.replace(
            self, parents=torch.where(kept, self.parents, -1), depths=torch.where(kept, self.depths, 0)
        )

    def ragged_mask(self, lengths: Sequence[int]) -> torch.Tensor:
        """The QLEN_ONLY mask of each request's first lengths[i] nodes, flat, request after request
        (n_i x n_i cells each: cpu/kernels/attention.py splits it by the ragged layout's lengths). The
        cells are picked by host lengths: a device mask's nonzero would wait for the device."""
        n = self.num_nodes
        cells = [i * n * n + (torch.arange(k).unsqueeze(1) * n + torch.arange(k)).flatten()
                 for i, k in enumerate(lengths)]  # fmt: skip
        return self.ancestor_mask().flatten()[torch.cat(cells).to(self.tokens.device)]

    def unbatch(self, i: int) -> Tree:
        """Request i's tree, padding included (for tests and logs: it reads nothing to the host)."""
        return Tree(self.tokens[i], self.parents[i], self.depths[i], num_real=self.num_real)


def _first_true(rows: torch.Tensor) -> torch.Tensor:
    """[..., n] bool -> the index of each row's first True, or -1."""
    n = rows.shape[-1]
    nodes = torch.arange(n, device=rows.device)
    first = torch.where(rows, nodes, n).amin(-1)
    return torch.where(first < n, first, -1)


def beam_widths(budget: int, width: int, depth_cap: int) -> list[int]:
    """Prefixes kept per depth 1..L: all K^d of them until there are more than `budget`."""
    widths, kept = [], 1
    for _ in range(depth_cap if budget > 0 and width > 0 else 0):
        kept = min(budget, kept * width)
        widths.append(kept)
    return widths


def build_batch_trees(
    root_tokens: torch.Tensor,
    draft_logprobs: torch.Tensor,
    budget: int,
    max_children: int | None = None,
    pad_token: int = 0,
) -> BatchTree:
    """One DDTree per request: root_tokens [bs], draft_logprobs [bs, L, V] (log q_d per mask
    position) -> a BatchTree of N = budget + 1 nodes per request. `max_children` caps the children
    of a node at the K most probable tokens of their depth, as in tree.build_tree."""
    draft_logprobs = draft_logprobs[:, :budget]  # no prefix of a budget-b tree is deeper than b
    bs, depth_cap, vocab = draft_logprobs.shape
    device = draft_logprobs.device
    width = min(budget, vocab, max_children or vocab)
    widths = beam_widths(budget, width, depth_cap)
    top_logprobs, top_tokens = draft_logprobs.float().topk(width, dim=-1)  # [bs, L, K]

    # Every depth's beam, concatenated after the root: score, token, depth and parent's entry.
    scores, tokens = [top_logprobs.new_zeros(bs, 1)], [root_tokens.view(bs, 1).long()]
    parent_entries, depth_of = [torch.full((bs, 1), -1, device=device)], [0]
    beam, parent_beam_start = top_logprobs.new_zeros(bs, 1), 0  # the root's beam: itself, score 0
    for depth, kept in enumerate(widths, start=1):
        parent_beam_size = beam.shape[1]
        candidates = (beam.unsqueeze(-1) + top_logprobs[:, depth - 1].unsqueeze(1)).flatten(1)
        beam, order = candidates.sort(dim=-1, descending=True, stable=True)
        beam, order = beam[:, :kept], order[:, :kept]
        scores.append(beam)
        tokens.append(top_tokens[:, depth - 1].gather(1, order % width))
        parent_entries.append(parent_beam_start + order // width)
        depth_of += [depth] * kept
        parent_beam_start += parent_beam_size  # the entries just appended: the next depth's parents
    scores, tokens, parent_entries = (torch.cat(parts, dim=1) for parts in (scores, tokens, parent_entries))
    depth_of = torch.tensor(depth_of, device=device)

    # The tree: the best `budget` entries but the root, in score order (stable: ties to shallower).
    num_real = min(budget, scores.shape[1] - 1) + 1
    picked = scores[:, 1:].sort(dim=-1, descending=True, stable=True).indices[:, : num_real - 1] + 1
    picked = torch.cat([picked.new_zeros(bs, 1), picked], dim=1)  # node 0: the root
    node_of_entry = torch.full_like(scores, -1, dtype=torch.int64)
    node_of_entry.scatter_(1, picked, torch.arange(num_real, device=device).expand(bs, -1))
    parent_entry = parent_entries.gather(1, picked)
    parents = torch.where(parent_entry >= 0, node_of_entry.gather(1, parent_entry.clamp_min(0)), -1)

    pad = budget + 1 - num_real
    fill = lambda value: torch.full((bs, pad), value, dtype=torch.int64, device=device)  # noqa: E731
    return BatchTree(
        tokens=torch.cat([tokens.gather(1, picked), fill(pad_token)], dim=1),
        parents=torch.cat([parents, fill(-1)], dim=1),
        depths=torch.cat([depth_of[picked], fill(0)], dim=1),
        max_depth=depth_cap,
        num_real=num_real,
    )


class BatchTreeAcceptance(NamedTuple):
    """Each request's greedy walk down its own tree."""

    on_path: torch.Tensor  # [bs, N] bool: the accepted nodes, the root included
    last: torch.Tensor  # [bs] the deepest accepted node
    bonus: torch.Tensor  # [bs] the target's token at `last`: emitted after the accepted drafts
    accept_index: torch.Tensor  # [bs, L + 1] accepted node ids by depth, root first, -1 after
    accept_lens: torch.Tensor  # [bs] accepted nodes, the root included (1 .. L + 1)


def follow_batch(tree: BatchTree, predictions: torch.Tensor) -> BatchTreeAcceptance:
    """tree.follow per request: the longest root path whose every node carries the target's
    prediction at its parent. predictions: [bs, N] the target's token at each node (argmax, or
    one sample per node). Children of a node hold distinct tokens, so the accepted nodes form one
    path; padding has no parent, so it never matches."""
    matched = (tree.tokens == predictions.gather(1, tree.parents.clamp_min(0))) & (tree.parents >= 0)
    matched[:, 0] = True
    on_path = ~(tree.ancestor_mask() & ~matched.unsqueeze(1)).any(-1)  # no miss on the root path
    last = (on_path * (tree.depths + 1)).argmax(-1)  # depth + 1: the root wins over unaccepted nodes
    bonus = predictions.gather(1, last.unsqueeze(-1)).squeeze(-1)

    # One accepted node per depth: scatter node ids to their depth's column, the rest to a spare one.
    bs, n = tree.tokens.shape
    spare = tree.max_depth + 1
    columns = torch.where(on_path, tree.depths, spare)
    nodes = torch.arange(n, device=tree.tokens.device).expand(bs, n)
    accept_index = torch.full((bs, spare + 1), -1, dtype=torch.int64, device=tree.tokens.device)
    accept_index = accept_index.scatter(1, columns, nodes)[:, :spare]
    return BatchTreeAcceptance(on_path, last, bonus, accept_index, on_path.sum(-1))


def path_tokens(tree: BatchTree, accepted: BatchTreeAcceptance) -> Acceptance:
    """What a chain step commits, in its layout: `tokens[i, :lengths[i]]` are request i's accepted
    drafts in depth order followed by the bonus, in a [bs, L + 1] block; the rest is 0."""
    drafts = accepted.accept_index[:, 1:]
    tokens = torch.where(drafts >= 0, tree.tokens.gather(1, drafts.clamp_min(0)), 0)
    tokens = torch.cat([tokens, tokens.new_zeros(tokens.shape[0], 1)], dim=1)
    lengths = accepted.accept_lens
    tokens = tokens.scatter(1, (lengths - 1).unsqueeze(-1), accepted.bonus.unsqueeze(-1))
    return Acceptance(lengths, tokens)
