"""Tree budgets as verify widths: what the adaptive width knows of trees (docs/adaptive.md).

With `--speculative-eagle-topk K > 1`, a step of width w verifies a tree of w nodes (budget w - 1;
w = 1 is plain decoding). The adaptive policy picks w among a few budgets (0, 1, 2, 4, 8, ... and
the whole N - 1) by the chain's rule, expected committed tokens per second
(width/policy.py, `ranked_widths`); this module gives it each request's expected accepted drafts per budget.

Best-first trees nest: the tree of budget b is the first b + 1 nodes of every larger budget's tree
(node order is the pop order, tree/batch.py), and node ids grow along every root path. So one step
at budget b shows what every budget c <= b would have accepted, from the same target draws (so at
temperature > 0 too): the accepted path's nodes with ids <= c. Each request keeps the mean of that
per budget, censored at the budget that ran (as a chain's positions are censored at its width),
on top of the server's pooled means (worth a few steps; the latest ones, since the first steps of
a server see little). The counts are computed on the device and
read on the host a step later (runtime/host_copies.py): no host sync.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..runtime.host_copies import LaggedHostCopies


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


@dataclass
class TreeAcceptanceProfile:
    """One request's mean accepted drafts per tree budget, with `prior_means` worth
    `prior_weight` steps."""

    budgets: Sequence[int]  # increasing
    prior_means: Sequence[float]
    prior_weight: float = 4.0
    sums: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    forget: float = 1.0  # sums and steps x this at each step that tests drafts (1: keep all)

    def __post_init__(self):
        self.sums = self.sums or [0.0] * len(self.budgets)
        self.steps = self.steps or [0] * len(self.budgets)

    def record(self, budget_ran: int, accepted: Sequence[int]) -> None:
        """A step at `budget_ran`; accepted[k] is what budgets[k] would have accepted (censored:
        larger budgets than the one that ran learn nothing)."""
        if self.forget < 1.0 and budget_ran > 0:
            self.sums = [total * self.forget for total in self.sums]
            self.steps = [steps * self.forget for steps in self.steps]
        for k, budget in enumerate(self.budgets):
            if budget <= budget_ran:
                self.sums[k] += accepted[k]
                self.steps[k] += 1

    def means(self) -> list[float]:
        """Per budget, non-decreasing: a larger tree holds the smaller one."""
        out, most, w = [], 0.0, self.prior_weight
        for total, steps, prior in zip(self.sums, self.steps, self.prior_means, strict=True):
            most = max(most, (total + w * prior) / (steps + w))
            out.append(most)
        return out

    def expected_tokens(self, width: int) -> float:
        return self.expected_tokens_at([width])[0]

    def expected_tokens_at(self, widths: Sequence[int]) -> list[float]:
        """The bonus token plus the accepted drafts at the largest budget each width's tree holds."""
        means = [0.0, *self.means()]  # non-decreasing: the largest budget below w is the best
        return [1.0 + means[bisect.bisect_left(self.budgets, width)] for width in widths]


class TreeAcceptance:
    """Every request's TreeAcceptanceProfile, fed by the walks of tree steps (`walked`)."""

    def __init__(
        self, widths: Sequence[int], depth_cap: int, device, keep: int = 4096, pool_forget: float = 1.0
    ):
        self.budgets = [width - 1 for width in widths]
        self.budgets_on_device = torch.tensor(self.budgets, device=device)
        self.copies = LaggedHostCopies(device)
        self.keep = keep
        self.entries: dict[str, TreeAcceptanceProfile] = {}
        # Before any step: a chain's flat prior (each draft accepted with probability 1/2).
        flat = [1 - 0.5 ** min(budget, depth_cap) for budget in self.budgets]
        self.pooled = TreeAcceptanceProfile(self.budgets, flat, prior_weight=1.0, forget=pool_forget)

    def walked(self, reqs, front: torch.Tensor, lengths: torch.Tensor, nodes: Sequence[int] | None = None):
        """A tree step of width front.shape[1] was walked (or, with per-request lengths, request i's
        first nodes[i] nodes): start copying what each budget accepted."""
        counts = accepted_within(front, lengths, self.budgets_on_device)
        budgets = [front.shape[1] - 1] * len(reqs) if nodes is None else [n - 1 for n in nodes]
        self.copies.put(counts, ([req.rid for req in reqs], budgets))

    def recent_accepted_drafts(self) -> float:
        """The drafts the server's recent steps accept a step at the whole tree (pooled)."""
        return self.pooled.means()[-1]

    def verified(self, reqs, width: int, lengths: Sequence[int] | None = None) -> None:
        """Nothing: the walk reports (`walked`); plain steps accept no drafts at any budget."""

    def profiles(self, reqs) -> list[TreeAcceptanceProfile]:
        for (rids, budgets), counts in self.copies.landed():
            for rid, budget, accepted in zip(rids, budgets, counts.tolist(), strict=True):
                self._profile(rid).record(budget, accepted)
                self.pooled.record(budget, accepted)
        pooled = self.pooled.means()
        profiles = [self._profile(req.rid) for req in reqs]
        for profile in profiles:
            profile.prior_means = pooled  # the server's latest, not what its first steps saw
        return profiles

    def _profile(self, rid: str) -> TreeAcceptanceProfile:
        profile = self.entries.get(rid)
        if profile is None:
            if len(self.entries) >= self.keep:  # forget the oldest requests, long finished
                for old in list(self.entries)[: self.keep // 2]:
                    del self.entries[old]
            profile = self.entries[rid] = TreeAcceptanceProfile(self.budgets, self.pooled.means())
        return profile
