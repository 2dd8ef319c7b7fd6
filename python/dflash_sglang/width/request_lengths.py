"""Per-request verify lengths: each request in a step verifies its own number of positions.

One width per batch verifies the same w positions for every request: where requests whose drafts
fit share a batch with requests whose drafts rarely do, the good ones are cut short or the bad
ones pay for drafts that fail. Here request i verifies L_i positions (1 <= L_i <= the block; 1 is
plain decoding for that request), all packed into one ragged target forward (step/ragged.py),
chosen to maximise the step's expected committed tokens per second:

    rate(L) = sum_i E_i[tokens | L_i]  /  cost(bs, T / bs),   T = sum_i L_i

The gain of request i's position k + 1 is s_ik = P(its first k drafts are all accepted), which
falls with k (AcceptanceProfile). For every total T, the L with the most expected tokens takes
the T - bs largest gains over all requests (each request's gains are taken in order, since they
fall), so one pass over the sorted gains rates every T. The cost is the adaptive width's curve
(width/step_cost.StepCost): the plain step plus, where the drafter runs only for the n requests
verifying drafts (step/drafting.py, without a draft window), a share of a uniform step's extra
cost at their mean width, n / bs beyond a fixed part the partial steps' times tell
(`ragged_seconds`, width/step_cost.PartialSteps); with every request drafted, the curve at T / bs.

Switches: `DFLASH_SGLANG_REQUEST_LENGTHS=0` verifies one width a batch (the adaptive width's); `=1`
asks for per-request lengths, and fails at startup where the path cannot verify them (why is
named). `DFLASH_SGLANG_FORCED_REQUEST_LENGTHS="8,1,4"` forces a cycle (a testing switch).
`DFLASH_SGLANG_PARTIAL_DRAFTER=1`: a ragged step drafts only its requests of length > 1, priced so.
Nothing here touches SGLang; width/controller.py calls it with host-side numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..environment import FORCED_REQUEST_LENGTHS, PARTIAL_DRAFTER, REQUEST_LENGTHS, Switch
from ..errors import DFlashConfigError
from .ranking import PLAIN_MARGIN
from .step_cost import StepCost

LENGTHS_ENV = REQUEST_LENGTHS.name  # per-request lengths, with the adaptive width
FORCED_LENGTHS_ENV = FORCED_REQUEST_LENGTHS.name  # "1,4,8": a testing cycle
# A ragged step drafts only its requests of length > 1 (off by default: on the mixed load it ran
# below drafting every request, 2026-11-27, docs/journal/adaptive.md).
PARTIAL_DRAFTER_ENV = PARTIAL_DRAFTER.name

# Rates are compared at about this many totals T (every T at small batches): a batch of 32 at
# block 16 has 480 totals, and pricing each on the curve every step cost milliseconds of host time.
RATED_TOTALS = 64


@dataclass(frozen=True)
class RequestLengths:
    lengths: tuple[int, ...]  # each request's verify length, in batch order
    tokens: float  # expected committed tokens of the step, all requests
    seconds: float  # the step's estimated cost

    @property
    def width(self) -> int:
        return max(self.lengths)

    @property
    def total(self) -> int:
        return sum(self.lengths)

    @property
    def uniform(self) -> bool:
        return min(self.lengths) == max(self.lengths)


def request_lengths(
    profiles: Sequence,
    cost: StepCost,
    widest: int,
    plain_margin: float = PLAIN_MARGIN,
    partial_drafter: bool = False,
) -> RequestLengths:
    """The lengths with the most expected committed tokens per second, each in 1..widest (plain
    decoding for all unless a drafted choice beats it by `plain_margin`, as ranked_widths).
    partial_drafter: the drafter runs only for the requests verifying drafts (ragged_seconds)."""
    bs = len(profiles)
    gains = []  # (s_ik, request), each request's in falling order
    for i, profile in enumerate(profiles):
        chain = 1.0
        for q in profile.acceptance()[: widest - 1]:
            chain *= q
            gains.append((chain, i))
    plain_seconds = cost.step(bs, 1)
    best_rate, best_taken, best = (1 + plain_margin) * bs / plain_seconds, 0, (float(bs), plain_seconds)
    # Every drafted choice commits at most all the gains and costs at least one draft's step: where
    # even that does not beat plain decoding (drafts that rarely fit), the search is not worth its
    # host time (most of a millisecond at batch 16 and block 16, a step every step).
    cheapest = ragged_seconds(cost, bs, 1, 1 if partial_drafter else bs, plain_seconds)
    if (bs + sum(gain for gain, _ in gains)) / cheapest <= best_rate:
        return RequestLengths((1,) * bs, *best)
    gains.sort(key=lambda gain: -gain[0])  # stable: a request's equal gains keep their order
    stride = max(1, len(gains) // RATED_TOTALS)
    tokens, drafted, seen = float(bs), 0, [False] * bs
    for taken, (gain, i) in enumerate(gains, start=1):
        tokens += gain
        drafted += not seen[i]
        seen[i] = True
        if taken % stride and taken != len(gains):
            continue
        seconds = ragged_seconds(cost, bs, taken, drafted if partial_drafter else bs, plain_seconds)
        if tokens / seconds > best_rate:
            best_rate, best_taken, best = tokens / seconds, taken, (tokens, seconds)
    lengths = [1] * bs
    for _, i in gains[:best_taken]:
        lengths[i] += 1
    return RequestLengths(tuple(lengths), *best)


def tree_request_lengths(
    profiles: Sequence, cost: StepCost, candidates: Sequence[int], plain_margin: float = PLAIN_MARGIN
) -> RequestLengths:
    """Trees: request i verifies its tree's first L_i nodes, L_i among the policy's tree widths
    (`candidates`, 1 = plain decoding), E_i[tokens | L] from its TreeAcceptanceProfile. Along the
    upper concave hull of each request's (L, E_i) the tokens a node fall, so, as for a chain, the
    best lengths at every total take the steepest steps over all requests, in order."""
    bs = len(profiles)
    steps = []  # (tokens a node, nodes, tokens, request, its length after the step)
    for i, profile in enumerate(profiles):
        hull = upper_hull(list(zip(candidates, profile.expected_tokens_at(candidates), strict=True)))
        for (w0, e0), (w1, e1) in zip(hull, hull[1:], strict=False):
            steps.append(((e1 - e0) / (w1 - w0), w1 - w0, e1 - e0, i, w1))
    plain_seconds = cost.step(bs, 1)
    best_rate, best_taken, best = (1 + plain_margin) * bs / plain_seconds, 0, (float(bs), plain_seconds)
    cheapest = ragged_seconds(cost, bs, 1, bs, plain_seconds)  # every tree pays the drafter's forward
    if (bs + sum(step[2] for step in steps)) / cheapest <= best_rate:
        return RequestLengths((1,) * bs, *best)
    steps.sort(key=lambda step: -step[0])  # stable: a request's steps keep their (falling) order
    tokens, nodes = float(bs), 0
    for taken, (_, more_nodes, more_tokens, _, _) in enumerate(steps, start=1):
        tokens, nodes = tokens + more_tokens, nodes + more_nodes
        seconds = ragged_seconds(cost, bs, nodes, bs, plain_seconds)
        if tokens / seconds > best_rate:
            best_rate, best_taken, best = tokens / seconds, taken, (tokens, seconds)
    lengths = [1] * bs
    for _, _, _, i, length in steps[:best_taken]:
        lengths[i] = max(lengths[i], length)
    return RequestLengths(tuple(lengths), *best)


def upper_hull(points: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The upper concave hull of (nodes, expected tokens) by increasing nodes, from the first point,
    rising only: each step along it adds fewer tokens a node than the one before."""
    hull: list[tuple[int, float]] = []
    for x, y in points:
        if hull and y <= hull[-1][1]:
            continue  # more nodes for no more tokens: never worth a step
        while len(hull) >= 2 and cross(hull[-2], hull[-1], (x, y)) >= 0:
            hull.pop()  # the middle point lies on or under the chord
        hull.append((x, y))
    return hull


def cross(a, b, c) -> float:
    """> 0 where b lies under the chord from a to c, 0 on it."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def ragged_seconds(
    cost: StepCost, batch_size: int, drafts: int, drafted: int, plain: float | None = None
) -> float:
    """A step verifying `drafts` drafts in all, over `drafted` of its requests (the rest plain):
    the plain step, plus the drafted requests' share of a uniform step's extra cost at their mean
    width, beyond the share every partial step pays (step_cost.PartialSteps). Where the drafter
    runs for every request, `drafted` is the batch size: the uniform step at T / bs."""
    plain = cost.step(batch_size, 1) if plain is None else plain  # (the caller's, when it has it)
    if drafts == 0:
        return plain
    part = drafted / batch_size
    share = part + (1 - part) * cost.partial_fixed
    return plain + share * (cost.step(batch_size, 1 + drafts / drafted) - plain)


def drafted_rows(lengths: Sequence[int] | None) -> list[int] | None:
    """The requests a ragged step drafts for: those verifying drafts (length > 1); None for all."""
    if lengths is None:
        return None
    rows = [i for i, length in enumerate(lengths) if length > 1]
    return None if len(rows) == len(lengths) else rows


def forced_lengths(pattern: Sequence[int], step: int, batch_size: int, widest: int) -> RequestLengths:
    """A testing cycle: request i of step s verifies pattern[(s + i) % len(pattern)] positions,
    capped at the block, so one batch mixes lengths and each request sees every length."""
    lengths = tuple(min(pattern[(step + i) % len(pattern)], widest) for i in range(batch_size))
    return RequestLengths(lengths, 0.0, 0.0)


def env_cycle(switch: Switch, widest: int, what: str) -> tuple[int, ...]:
    """A forced cycle of `what` (widths, lengths) from a switch, or () when none is set; each must
    be in 1..widest."""
    cycle = switch.value()
    if any(not 1 <= n <= widest for n in cycle):
        text = ",".join(map(str, cycle))
        raise DFlashConfigError(f"{switch.name}={text!r}: each {what} must be in 1..{widest}")
    return cycle


# Trees take one budget a batch unless asked: inside one server process (bench/one_process.py) the
# adaptive 64-node tree with per-request budgets ran at 0.88 / 0.91 of one budget a batch at
# concurrency 8 / 16 (0 and 2 of 10 rounds above) and level at 4 (docs/journal/adaptive.md, 2026-11-28).
TREES_ONE_BUDGET = (
    f"trees: one budget a batch measured ahead of per-request budgets; {LENGTHS_ENV}=1 for them"
)


def per_request_requested(off_because: str | None, by_default: bool = True) -> bool:
    """The per-request lengths switch (with the adaptive width): `1` on, `0` off, unset on where
    the path can verify them (`off_because` None) and `by_default`, else off; `1` where the path
    cannot fails, naming why."""
    on = REQUEST_LENGTHS.value()
    if on is None:
        return by_default and off_because is None
    if on and off_because is not None:
        raise DFlashConfigError(f"{LENGTHS_ENV}=1: {off_because}")
    return on


def partial_drafter_requested(window_size: int | None) -> bool:
    """The partial drafter switch: `1` on (refused with a draft window, whose ring drafts every
    request), unset or `0` off."""
    on = PARTIAL_DRAFTER.value()
    if on and window_size is not None:
        raise DFlashConfigError(
            f"{PARTIAL_DRAFTER_ENV}=1 with --speculative-draft-window-size: the ring drafts every request"
        )
    return on


def forced_request_lengths(widest: int, off_because: str | None) -> tuple[int, ...]:
    """The forced cycle of per-request lengths (a testing switch), or () when none is set."""
    lengths = env_cycle(FORCED_REQUEST_LENGTHS, widest, "length")
    if lengths and off_because is not None:
        raise DFlashConfigError(f"{FORCED_LENGTHS_ENV}: {off_because}")
    return lengths
