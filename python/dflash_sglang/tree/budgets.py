"""Tree budgets as verify widths: what the adaptive width knows of trees (docs/adaptive.md).

With `--speculative-eagle-topk K > 1`, a step of width w verifies a tree of w nodes (budget w - 1;
w = 1 is plain decoding). The adaptive policy picks w among a few budgets (0, 1, 2, 4, 8, ... and
the whole N - 1) by the chain's rule, expected committed tokens per second
(width/ranking.py, `ranked_widths`); this module gives it the budgets and what each would have
accepted, and width/acceptance_profiles.py (TreeAcceptance) each request's expected accepted
drafts per budget from them.

Best-first trees nest: the tree of budget b is the first b + 1 nodes of every larger budget's tree
(node order is the pop order, tree/batch.py), and node ids grow along every root path. So one step
at budget b shows what every budget c <= b would have accepted, from the same target draws (so at
temperature > 0 too): the accepted path's nodes with ids <= c.
"""

from __future__ import annotations

import torch


def tree_widths(widest: int) -> list[int]:
    """The widths the policy considers for trees of at most `widest` nodes: plain decoding, the
    budgets 1, 2, 4, 8, ... below the whole tree, and the whole tree."""
    widths, budget = {1, widest}, 1
    while budget + 1 < widest:
        widths.add(budget + 1)
        budget *= 2
    return sorted(widths)


def accepted_within(front: torch.Tensor, lengths: torch.Tensor, budgets: torch.Tensor) -> torch.Tensor:
    """[bs, C]: the drafts each budget would have accepted. front[:, d] is the accepted path's node
    at depth d for d < lengths (tree_verify.accept); a budget c keeps the path's nodes with id <= c."""
    depth = torch.arange(front.shape[1], device=front.device)
    on_path = (depth >= 1) & (depth < lengths.unsqueeze(1))
    nodes = torch.where(on_path, front, front.shape[1])  # off the path: above every budget
    return (nodes.unsqueeze(-1) <= budgets).sum(1)
