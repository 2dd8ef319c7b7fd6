"""The widths ranked by expected committed tokens per second (docs/adaptive.md): where the
acceptance estimates (width/acceptance_profiles.py) meet the cost model (width/step_cost.py).

Each decode step chooses one width w (width/controller.py: the first w positions of every
request's drafted block; w = 1 is plain decoding) to maximise the expected committed tokens per
second:

    rate(w) = sum over requests i of E_i[tokens | w]  /  cost(bs, w)

- E_i[tokens | w] = 1 + sum_{k=1}^{w-1} prod_{j<=k} q_ij, where q_ij is request i's estimated
  probability that draft j is accepted given drafts 1..j-1 were (AcceptanceProfile: online counts
  per position with a Beta prior, censored at the width each step used; a new request's prior is
  the server's pooled acceptance, worth a few steps of its own); a tree's, its accepted drafts at
  the largest budget the width's tree holds (TreeAcceptanceProfile);
- cost(bs, w): the step's measured time (StepCost).

Nothing here touches SGLang; the worker feeds it host-side numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .step_cost import StepCost


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
    (ties: smaller first; plain decoding first unless beaten by `plain_margin`). A profile gives
    `expected_tokens_at(widths)`: a chain's AcceptanceProfile, or a tree's TreeAcceptanceProfile."""
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
