"""What drafts each request is expected to accept: the adaptive width's acceptance estimates
(docs/adaptive.md), from host-side data only, for chains and for trees.

- A chain: SGLang's scheduler keeps, per request, a histogram of accepted drafts per step
  (`Req.spec_correct_drafts_histogram`, host side, updated as each step's result is processed).
  New entries are paired, oldest first, with the widths this worker verified the request's steps
  at, and fed to the request's `AcceptanceProfile` (online counts per draft position with a Beta
  prior, censored at the width each step used). Under the overlap loop the histogram lags one
  step: the pairing is by order, so the lag costs nothing but freshness. Every step also feeds a
  pooled profile of all requests, and a new request starts from it (a request's first steps are
  sized by what drafts achieve on this server, not by a flat prior); the pool forgets
  (POOL_HALF_LIFE), so it tells what drafts achieve now. Greedy and sampled requests keep pools of
  their own as well, and a new request starts from its kind's once that has seen a few steps:
  drafts fit a greedy request far better than one sampled at T 1.0 (about 4 tokens a step against
  1.4 on the tiny pair), and while a mixed batch decodes plain for most steps a request learns its
  own acceptance only from exploring steps, so its start decides whether per-request lengths give
  it drafts at all.
- A tree (`--speculative-eagle-topk K > 1`, a width w is a tree of w nodes, budget w - 1):
  best-first trees nest (tree/budgets.py), so one step at budget b shows what every budget c <= b
  would have accepted, from the same target draws (so at temperature > 0 too). Each request keeps
  the mean of that per budget (`TreeAcceptanceProfile`), censored at the budget that ran (as a
  chain's positions are censored at its width), on top of the server's pooled means (worth a few
  steps; the latest ones, since the first steps of a server see little). The counts are computed
  on the device and read on the host a step later (runtime/host_copies.py): no host sync.

Nothing here reads device data on the host.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..runtime.host_copies import LaggedHostCopies
from ..tree.budgets import accepted_within

# The server's pooled statistics (a new request's prior) weigh a request-step that tested drafts
# half as much after this many more: a drafter whose acceptance collapses (a swapped or quantized
# drafter, a new kind of load) is seen within a few batches, not after everything it ever accepted.
# Short: once the policy verifies narrow, only exploring steps test drafts (at 256, a swapped-in
# useless drafter still drew a quarter of 100 steps wide at batch 8, six bursts later).
POOL_HALF_LIFE = 64


def pool_forget() -> float:
    """The factor the pooled counts are multiplied by at each request-step that tests drafts."""
    return 0.5 ** (1 / POOL_HALF_LIFE)


@dataclass
class AcceptanceProfile:
    """One request's online acceptance statistics by draft position (1-based)."""

    positions: int  # B - 1 draft positions
    prior: tuple[float, float] = (1.0, 1.0)  # Beta(a, b) pseudo-counts: accepted, rejected
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    # Per-position prior acceptance rates (e.g. the server's pooled ones), worth `prior_weight`
    # observations each; when given, they replace `prior`.
    prior_rates: Sequence[float] | None = None
    prior_weight: float = 4.0
    forget: float = 1.0  # counts x this at each step that tests drafts (1: remember everything)

    def __post_init__(self):
        self.reached = self.reached or [0] * self.positions
        self.accepted = self.accepted or [0] * self.positions

    def record(self, width: int, accepted_drafts: int) -> None:
        """A step that verified `width - 1` drafts and accepted the first `accepted_drafts`."""
        if self.forget < 1.0 and width > 1:
            self.reached = [n * self.forget for n in self.reached]
            self.accepted = [n * self.forget for n in self.accepted]
        for j in range(min(accepted_drafts + 1, width - 1)):  # drafts 1 .. accepted + 1 were tested
            self.reached[j] += 1
            self.accepted[j] += j < accepted_drafts

    def acceptance(self) -> list[float]:
        if self.prior_rates is None:
            # Position 1's prior is Beta(a, b); each later position's is the estimate before it,
            # with the same weight. A flat 0.5 beyond the positions seen made a good drafter's
            # wide widths look worthless while it verified narrow (every step censored there), so
            # they were never explored: a new server verified 4 of 8 for its first burst at 0.64x
            # the whole block's tokens/s.
            a, b = self.prior
            rates, prior_rate = [], a / (a + b) if a + b > 0 else 0.5
            for j in range(self.positions):
                evidence = self.reached[j] + a + b
                rate = (self.accepted[j] + (a + b) * prior_rate) / evidence if evidence > 0 else prior_rate
                rates.append(rate)
                prior_rate = rate
            return rates
        w = self.prior_weight
        return [
            (self.accepted[j] + w * rate) / (self.reached[j] + w) for j, rate in enumerate(self.prior_rates)
        ]

    def expected_tokens(self, width: int) -> float:
        return self.expected_tokens_at([width])[0]

    def expected_tokens_at(self, widths: Sequence[int]) -> list[float]:
        """expected_tokens at every width, from one pass over the positions."""
        totals, chain = [1.0], 1.0  # totals[w - 1]: expected tokens at width w
        for q in self.acceptance()[: max(widths) - 1]:
            chain *= q
            totals.append(totals[-1] + chain)
        return [totals[min(w, len(totals)) - 1] for w in widths]


# A kind's own pool starts new requests once it has tested this many drafts at position 1 (counts
# decay with the pool's forgetting); before that, the pool of all requests does.
KIND_POOL_EVIDENCE = 4.0


def greedy(req) -> bool:
    """A greedy request (SGLang turns temperature 0 into top_k 1); one without sampling params too."""
    params = getattr(req, "sampling_params", None)
    return params is None or getattr(params, "top_k", 1) == 1


class RequestAcceptance:
    def __init__(self, positions: int, keep: int = 4096, pool_forget: float = 1.0):
        self.positions, self.keep = positions, keep
        self.entries: dict[str, tuple[AcceptanceProfile, list[int], deque]] = {}
        self.pooled = AcceptanceProfile(positions, forget=pool_forget)  # recent steps weigh most
        self.kinds = {kind: AcceptanceProfile(positions, forget=pool_forget) for kind in (True, False)}

    def _entry(self, req):
        entry = self.entries.get(req.rid)
        if entry is None:
            if len(self.entries) >= self.keep:  # forget the oldest requests, long finished
                for rid in list(self.entries)[: self.keep // 2]:
                    del self.entries[rid]
            kind = self.kinds[greedy(req)]
            pool = kind if kind.reached[0] >= KIND_POOL_EVIDENCE else self.pooled
            profile = AcceptanceProfile(self.positions, prior_rates=pool.acceptance())
            entry = self.entries[req.rid] = (profile, [], deque(maxlen=8))
        return entry

    def profiles(self, reqs) -> list[AcceptanceProfile]:
        """Each request's profile, updated with the steps processed since the last call."""
        out = []
        for req in reqs:
            profile, seen, pending = self._entry(req)
            kind = self.kinds[greedy(req)]
            histogram = req.spec_correct_drafts_histogram
            seen.extend([0] * (len(histogram) - len(seen)))
            for accepted, count in enumerate(histogram):
                for _ in range(count - seen[accepted]):
                    width = pending.popleft() if pending else self.positions + 1
                    profile.record(width, accepted)
                    self.pooled.record(width, accepted)
                    kind.record(width, accepted)
                seen[accepted] = count
            out.append(profile)
        return out

    def recent_accepted_drafts(self) -> float:
        """The drafts the server's recent steps accept a step at the whole block (pooled)."""
        return self.pooled.expected_tokens(self.positions + 1) - 1

    def verified(self, reqs, width: int, lengths: Sequence[int] | None = None) -> None:
        """The width each request's step verified at (its own length, with per-request lengths)."""
        for i, req in enumerate(reqs):
            self._entry(req)[2].append(width if lengths is None else lengths[i])


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
