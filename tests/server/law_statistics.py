"""A likelihood-ratio test with power against the classic bugs of speculative sampling.

The target's law p_t given each completion's prefix is known exactly (law_matrix.law). For any
other law q_t that is itself fixed by the prefix (and by the block state law_drafts.py reads from
it), the running product of q_t(y_t) / p_t(y_t) is a martingale of mean 1 under p, whatever q is;
so is the average of several such products. By Ville's inequality, under the target's law
P(mean >= 1/alpha) <= alpha: the inverse of the mean is a valid p-value, exactly, for any sample
size. Under a sampler that draws from one of the q's, the product grows like exp(n KL(q || p)),
so each alternative below is one bug's own law (or a family around it), and one mean covers them
all:

- the draft's mass tilted, q(d) = p(d) + eps p(d)(1 - p(d)), the rest rescaled: a resample that
  keeps the rejected draft is eps = 1 exactly, acceptance with p^2 is eps = -1, sqrt(p) between;
- the draft accepted with probability p(d)^g (p^2, sqrt(p), and near 1: the drafts judged at a
  temperature a little off);
- the draft's mass taken from the law at another temperature, or from the law with the frequency
  penalty one token stale; and the whole law at another temperature at the positions that verify
  a draft (every position but the bonus: a temperature wrong at the draft positions only);
- the whole law at another temperature, with a stale penalty, or filtered before the temperature
  (top_p or min_p measured on the untempered probabilities);
- a mixture with the previous position's law (a token drawn at the wrong position), everywhere
  and at bonus positions only.
A test that the code under test never fits loses only its share of the mean (a factor m).
"""

from __future__ import annotations

import math

import torch

from .law_drafts import BlockState

TILTS = (-1.0, -0.5, -0.25, -0.1, 0.1, 0.25, 0.5, 1.0)
ACCEPT_POWERS = (0.5, 0.8, 0.9, 1.1, 1.25, 2.0)
TEMPERATURE_FACTORS = (0.9, 1.1)
MIXTURES = (0.5, 1.0)


def likelihood_ratio_pvalue(
    law, logits: torch.Tensor, tokens: torch.Tensor, params: dict, target: torch.Tensor,
    usable: torch.Tensor, state: BlockState | None, more: list | None = None,
) -> float:  # fmt: skip
    """1 / mean over the alternatives of prod_t q_t(y_t) / p_t(y_t); `law(logits, tokens, params)`
    builds a law as law_matrix does, `target` is the tested law [n, L, V] and `usable` [n, L] marks
    the positions counted (where float32 and float64 filters agree on the support); `more`: log
    products of other alternatives (law_sampled.py's, for sampled drafts)."""
    chosen = tokens.unsqueeze(-1)
    p_y = target.gather(-1, chosen).squeeze(-1)
    log_ratios = []  # one log product per alternative

    def add(q_y: torch.Tensor) -> None:  # q_t(y_t), [n, L]
        ratio = torch.where(usable & (p_y > 0), q_y / p_y.clamp_min(1e-300), torch.ones_like(p_y))
        log_ratios.append(ratio.clamp_min(1e-300).log().sum())

    def add_draft_mass(q_d: torch.Tensor, where: torch.Tensor) -> None:
        """The draft's mass q_d instead of p(d), the other tokens rescaled together."""
        hit = tokens == draft
        ratio_hit = q_d / p_d.clamp_min(1e-300)
        ratio_miss = (1 - q_d) / (1 - p_d).clamp_min(1e-300)
        ratio = torch.where(hit, ratio_hit, ratio_miss)
        add(torch.where(where & (p_d > 0) & (p_d < 1), ratio * p_y, p_y))

    alternatives = [(f"T x{c}", tempered(params, c)) for c in TEMPERATURE_FACTORS]
    if params.get("frequency_penalty"):
        alternatives.append(("stale penalty", {**params, "stale_penalty": True}))
    if any(key in params for key in ("top_p", "min_p", "top_k")):
        alternatives.append(("filter before temperature", {**params, "filter_untempered": True}))
    laws = {name: law(logits, tokens, alt) for name, alt in alternatives}
    stale_rows = state.in_block if state is not None else torch.ones_like(usable)
    stale_rows = stale_rows.clone()
    stale_rows[:, 0] = False
    for name, q in laws.items():
        q_y = q.gather(-1, chosen).squeeze(-1)
        if name == "stale penalty":
            q_y = torch.where(stale_rows, q_y, p_y)
        add(q_y)

    previous = torch.cat([target[:, :1], target[:, :-1]], dim=1).gather(-1, chosen).squeeze(-1)
    previous[:, 0] = p_y[:, 0]
    for weight in MIXTURES:
        add((1 - weight) * p_y + weight * previous)
        if state is not None:
            add(torch.where(state.bonus, (1 - weight) * p_y + weight * previous, p_y))

    if state is not None:
        draft = state.draft.clamp_min(0)
        has_draft = state.draft >= 0
        p_d = target.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
        for eps in TILTS:
            add_draft_mass(p_d + eps * p_d * (1 - p_d), has_draft)
        for power in ACCEPT_POWERS:
            add_draft_mass(p_d**power, has_draft)
        for name, q in laws.items():
            where = has_draft & (stale_rows if name == "stale penalty" else True)
            add_draft_mass(q.gather(-1, draft.unsqueeze(-1)).squeeze(-1), where)
            if name.startswith("T x"):
                add(torch.where(has_draft, q.gather(-1, chosen).squeeze(-1), p_y))

    logs = torch.stack(log_ratios + list(more or []))
    # A NaN alternative (a law that broke down) counts as 0 in the mean, not as the whole mean:
    # NaN would make the p-value 1, and the divisor counts every alternative, `more`'s too.
    logs = torch.where(torch.isnan(logs), torch.full_like(logs, -math.inf), logs)
    log_mean = float(torch.logsumexp(logs, 0)) - math.log(len(logs))
    return min(1.0, math.exp(-log_mean)) if log_mean > -700 else 1.0


def tempered(params: dict, factor: float) -> dict:
    return {**params, "temperature": params.get("temperature", 1.0) * factor}
