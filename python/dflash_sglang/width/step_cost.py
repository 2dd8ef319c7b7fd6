"""The load-adaptive verify width, as a pure function of measured costs and acceptance (docs/adaptive.md).

Each decode step chooses one width w (width/verify_width.py: the first w positions of every request's
drafted block; w = 1 is plain decoding) to maximise the expected committed tokens per second:

    rate(w) = sum over requests i of E_i[tokens | w]  /  cost(bs, w)

- E_i[tokens | w] = 1 + sum_{k=1}^{w-1} prod_{j<=k} q_ij, where q_ij is request i's estimated
  probability that draft j is accepted given drafts 1..j-1 were (AcceptanceProfile: online counts
  per position with a Beta prior, censored at the width each step used; a new request's prior is
  the server's pooled acceptance, worth a few steps of its own);
- cost(bs, w) = target(bs * w) + drafter(bs) [w > 1]: the step's time as a function of the verify
  tokens (StepCost: a piecewise-linear curve over measured points), plus the drafter's forward
  when there are drafts to verify. Where batch size bs has drafted steps of its own (`by_batch`),
  they price its widths instead: a step's cost is not only its tokens (per-request work dominates
  a small model on a CPU). A step of width 1 skips the drafter, so where it has been measured it
  has its own curve over the batch size (`plain_points`). The curve is where load enters: on a
  compute-bound target, bs * w tokens cost about w times bs tokens, so wide batches pick small w.
  On a CPU every step also pays the scheduler's host work between steps (`between_steps`).

Nothing here touches SGLang; the worker feeds it host-side numbers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class StepCost:
    """Seconds of a verify forward over `tokens` tokens, plus the drafter's seconds per request."""

    points: Sequence[tuple[int, float]]  # (verify tokens, seconds), at least two, increasing tokens
    drafter_per_request: float = 0.0
    drafter_fixed: float = 0.0
    plain_points: Sequence[tuple[int, float]] = ()  # measured width-1 steps: (batch size, seconds)
    # Measured drafted steps of one batch size: {batch size: [(width, seconds), ...]}.
    by_batch: dict = field(default_factory=dict)
    between_steps: float = 0.0  # host seconds between two steps, whatever their width
    # The share of a drafted step's extra cost that a ragged step drafting part of the batch pays
    # whatever its drafted requests (width/partial_steps.py).
    partial_fixed: float = 0.25

    def target(self, tokens: int) -> float:
        return interpolate(self.points, tokens)

    def step(self, batch_size: int, width: int) -> float:
        return self.forward(batch_size, width) + self.between_steps

    def plain_floor(self, batch_size: int) -> float:
        """The least a plain step of this batch size can cost: the plain curve at the largest
        batch size timed not above it (a step never costs less for more requests), else nothing."""
        below = [seconds for count, seconds in self.plain_points if count <= batch_size]
        return (below[-1] if below else 0.0) + self.between_steps

    def forward(self, batch_size: int, width: int) -> float:
        own = self.by_batch.get(batch_size)
        if width == 1 and self.plain_points:
            plain = interpolate(self.plain_points, batch_size)
            # A plain step does less than any drafted step of its batch size: a plain time above
            # one is noise (a busy machine when it was timed), and a width priced too high never
            # runs again to be corrected. A useless drafter verified whole blocks for hundreds of
            # steps where plain steps timed once at 213 ms stood against drafted ones at 120 ms.
            return min(plain, *(seconds for _, seconds in own)) if own else plain
        if width > 1 and own:  # this batch size's own steps, and around them:
            if width < own[0][0]:
                return self.below_narrowest(batch_size, width, own)
            widest, seconds = own[-1]
            if width > widest:  # what the extra tokens cost on the token curve (one own point
                # priced every wider width the same, and a hair more expected tokens ranked the
                # widest first among them: the worst case explored 16 tokens a request)
                return seconds + self.target(batch_size * width) - self.target(batch_size * widest)
            return interpolate(own, width)
        drafter = self.drafter_fixed + self.drafter_per_request * batch_size if width > 1 else 0.0
        return self.target(batch_size * width) + drafter

    def below_narrowest(self, batch_size: int, width: int, own) -> float:
        """A drafted width narrower than any this batch size has run: down from the narrowest at
        the slope of its own drafted steps, never below the plain step. A drafted step pays the
        drafter's forward at any width; a line from the plain step priced a good drafter's 2
        drafts at batch 16 at 24 ms against 50 for 7 (plain 18), and per-request lengths cut its
        requests short for that. With one own point, that line is all there is."""
        plain = interpolate(self.plain_points, batch_size) if self.plain_points else None
        (narrowest, seconds), (widest, widest_seconds) = own[0], own[-1]
        if widest == narrowest:
            line = ([(1, plain)] if plain is not None else []) + list(own)
            return interpolate(line, width)
        slope = max(0.0, (widest_seconds - seconds) / (widest - narrowest))  # noisy points may fall
        down = seconds - slope * (narrowest - width)
        return down if plain is None else max(plain, down)


def interpolate(points: Sequence[tuple[int, float]], x: int) -> float:
    """Piecewise-linear through the points (one point: flat). Below the first point, the first
    segment's slope; past the last, the chord's (first point to last). Optimistic on purpose: a
    width priced too low runs once and is measured, while one priced too high is never chosen and
    never measured (two noisy points at small counts used to price every wide tree out). Not the
    gentlest segment's: pooled (flat) segments made every wider width look free."""
    if len(points) == 1:
        return points[0][1]
    xs = [p for p, _ in points]
    if x > xs[-1]:
        (x0, y0), (x1, y1) = points[0], points[-1]
        return y1 + max((y1 - y0) / (x1 - x0), 0.0) * (x - x1)
    i = min(max(bisect.bisect_left(xs, x), 1), len(xs) - 1)  # the segment, or the first one
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(y0 + (y1 - y0) * (x - x0) / (x1 - x0), 1e-9)  # extrapolation stays positive


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


def best_width(profiles: Sequence, cost: StepCost, widths: Sequence[int]) -> int:
    """The width of `widths` with the most expected committed tokens per second (ties: smaller).
    A profile gives `expected_tokens_at(widths)`: a chain's AcceptanceProfile, or a tree's
    (tree/budgets.py)."""
    return ranked_widths(profiles, cost, widths)[0].width


@dataclass(frozen=True)
class Estimate:
    width: int
    tokens: float  # expected committed tokens of the step, all requests
    seconds: float  # the step's estimated cost

    def __str__(self) -> str:
        return f"{self.width}: {self.tokens:.1f} tok / {1000 * self.seconds:.1f} ms"


def worth_a_look(ranked: Sequence[Estimate], width: int, share: float) -> bool:
    """Whether `width`'s estimated tokens per second are at least `share` of the best's: an
    exploring step there costs at most 1 - share of a step's worth."""
    best = ranked[0]
    estimate = next(e for e in ranked if e.width == width)
    return estimate.tokens / estimate.seconds >= share * best.tokens / best.seconds


def plain_could_win(ranked: Sequence[Estimate], cost: StepCost, batch_size: int) -> bool:
    """Whether plain decoding (one token a request) at its least possible cost would beat the
    best-rated width: only then is a batch size's first plain step worth timing. A drafter
    accepting four tokens a step where a plain step costs most of a drafted one would otherwise pay
    one plain step at every new batch size, 8% of a short run's steps at concurrency 8."""
    best = ranked[0]
    plain_rate = batch_size / max(cost.plain_floor(batch_size), 1e-9)
    return best.width == 1 or plain_rate >= best.tokens / best.seconds


# Plain decoding (width 1) ranks first unless a drafted width's estimated rate beats it by this
# share. A plain step does less than any drafted one, but under noise its time is capped at the
# cheapest drafted step's (StepCost.forward), and a useless drafter's acceptance estimate stays a
# little above zero (its prior): the two left width 8 "ahead" by 2.5% with drafts that never fit,
# and a fifth of a loaded CI machine's steps verified whole blocks. A drafter that gains less than
# this is not worth its exploring steps either.
PLAIN_MARGIN = 0.05


def ranked_widths(
    profiles: Sequence, cost: StepCost, widths: Sequence[int], plain_margin: float = PLAIN_MARGIN
) -> list[Estimate]:
    """Every width's estimate, from the most expected committed tokens per second to the fewest
    (ties: smaller first; plain decoding first unless beaten by `plain_margin`)."""
    widths = sorted(widths)
    totals = [0.0] * len(widths)
    for profile in profiles:  # once per request: the policy runs every step
        for k, tokens in enumerate(profile.expected_tokens_at(widths)):
            totals[k] += tokens
    estimates = [
        Estimate(w, total, cost.step(len(profiles), w)) for w, total in zip(widths, totals, strict=True)
    ]
    ranked = sorted(estimates, key=lambda e: (-e.tokens / e.seconds, e.width))
    plain = next((e for e in ranked if e.width == 1), None)
    best = ranked[0]
    if plain is not None and best is not plain:
        if best.tokens / best.seconds < (1 + plain_margin) * plain.tokens / plain.seconds:
            ranked.remove(plain)
            ranked.insert(0, plain)
    return ranked
