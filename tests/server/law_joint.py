"""The joint law of a completion's tokens, judged position by position against the target's, with
the verify's acceptance pattern as context: power against classes of bugs, not named ones.

law_statistics.py and law_sampled.py test against the laws of named bugs; law_omnibus.py learns
the law at prefixes many completions share (the first positions only). A bug that keeps the first
token's law and moves the joint law of later ones (coins correlated across a block's positions,
steps or requests; drafts drawn from another law than the q the verify is told; p wrong at some
rows; a residual or bonus wrong) shows in how a token's law, given its prefix, depends on where it
sits in its step and on what the steps before did. Under a right verify it does not: token t
given its prefix and the pattern before it (law_pattern.py) follows p_t exactly, for token-wise
verification (min(q, p) + max(p - q, 0) = p) and block verification alike (P(the block goes on
with x | i - 1 kept) = min(q_i(x) / w_{i-1}, p_i(x)), P(it ends with x) = max(p_i(x) - q_i(x) /
w_{i-1}, 0): the same sum with q / w for q, docs/reliability.md).

So each alternative here tilts p by a feature of the token, exp(theta phi(x)), with theta its own
in each context, and a context is a function of the past alone:

features   over-proposed (q(x) >= p(x): the tokens only an accepted draft gives), log q/p, q's
           argmax (a draw that is not from q), log p (a temperature), log p_{t-1} / p_t (another
           row's law), the token's count so far (a penalty); q is the drafter's law at the step's
           block position (law_pattern.draft_logits), one-hot at the draft for point drafts,
           q / w_{i-1} as a block, the last draft's at a bonus (`as_seen`);
families   of contexts: all positions as one; the block position (the bonus apart); with the
           previous position's acceptance ratio min(1, p/q), as a block the prefix weight; with
           what this completion's previous step did at that position (coins reused across steps);
           with what the completions before it did at the same step and position (coins shared
           across requests).

In a context, theta is a mixture: KEEP at 0 and the rest over THETAS, so a context where nothing
moves costs at most log(1 / KEEP). Every term is a product of fixed likelihood ratios of laws fixed
by the past, so each family-feature pair is a martingale of mean 1 under p (tests/test_law_joint.py
sums every outcome of small cases), and joins the judge's mean of ratios (Ville's inequality).
Coins reused (law_coins.py) add one alternative a source.
"""

from __future__ import annotations

import math

import torch

from .law_coins import SOURCES, CoinLedger
from .law_pattern import Group, Places, Steps, places

THETAS = torch.tensor([-2.0, -1.0, -0.5, -0.25, -0.1, 0.1, 0.25, 0.5, 1.0, 2.0], dtype=torch.float64)
KEEP = 0.75  # each context's weight on theta = 0
FEATURES = ("over-proposed", "log q/p", "argmax of q", "log p", "previous row", "count")
FAMILIES = ("all", "position", "previous acceptance", "previous step", "other requests")
BINS = 4  # context codes: block position x 4
BONUS, UNPLACED = 1000, 1001  # the block position codes of a bonus and of a position no step places


def joint_log_ratios(groups: list[Group]) -> list[torch.Tensor]:
    """One log ratio (0-d float64) a (family, feature): the product over contexts of KEEP + (1 -
    KEEP) x the mean over THETAS of prod_t p_theta(y_t) / p_t(y_t); then one a coin source
    (law_coins.py, token-wise verification)."""
    sums: dict[tuple[int, int], torch.Tensor] = {}  # (family, context) -> [features, thetas]
    coins = torch.zeros(len(SOURCES), dtype=torch.float64)
    for group in groups:
        cross: dict[tuple[int, int], list[int]] = {}  # (step, i) -> [reached, accepted] so far
        ledger = CoinLedger()
        for row in range(group.tokens.shape[0]):
            steps = group.steps[row] if group.steps is not None else None
            where = places(steps, group.tokens.shape[1], group.block)
            q = draft_laws(group, row, where)
            seen, before = as_seen(group, row, where, q)
            ell = log_ratios(group.target[row], group.tokens[row], features(group, row, seen))
            counted = group.usable[row] & (group.target[row].gather(-1, group.tokens[row, :, None])[:, 0] > 0)
            for family, context in enumerate(contexts(group, row, where, before, cross, steps is not None)):
                for t in torch.nonzero(counted & (context >= 0)).flatten().tolist():
                    key = (family, int(context[t]))
                    sums[key] = sums.get(key, 0) + ell[t]
            if steps is not None and q is not None and group.token_wise:
                judge_coins(ledger, group, row, where, q, steps, counted)
            if steps is not None:
                remember(cross, steps, group.block)
        coins += torch.stack(ledger.log_ratios())
    out = torch.zeros(len(FAMILIES), len(FEATURES), dtype=torch.float64)
    for (family, _), total in sums.items():
        mixed = torch.logsumexp(total, -1) - math.log(len(THETAS)) + math.log(1 - KEEP)
        out[family] += torch.logaddexp(torch.tensor(math.log(KEEP), dtype=torch.float64), mixed)
    return list(out.flatten()) + list(coins)


def judge_coins(ledger: CoinLedger, group: Group, row: int, where: Places, q, steps: Steps, counted) -> None:
    """Every draft position of the row, in order, to the coin ledger."""
    p, tokens = group.target[row], group.tokens[row]
    for t in (
        torch.nonzero((where.step >= 0) & (where.position >= 1) & (where.position <= where.drafts))
        .flatten()
        .tolist()
    ):
        k, i = int(where.step[t]), int(where.position[t])
        if float(q[t].sum()) > 0:
            ledger.position(row, k, i, p[t], q[t], int(tokens[t]), i < steps.counts[k], bool(counted[t]))


def mean_pvalue(logs: list[torch.Tensor]) -> float:
    """1 / the mean of the ratios: their p-value on their own (Ville's inequality)."""
    log_mean = float(torch.logsumexp(torch.stack(logs), 0)) - math.log(len(logs))
    return min(1.0, math.exp(-log_mean)) if log_mean > -700 else 1.0


def draft_laws(group: Group, row: int, where: Places) -> torch.Tensor | None:
    """[L, V] q at each position's block start and position (zero rows where none: the prefill's
    token, a bonus, no pattern)."""
    length, vocab = group.tokens.shape[1], group.target.shape[-1]
    has = (where.step >= 0) & (where.position >= 1) & (where.position <= where.drafts)
    if group.drafts is not None:
        d = group.drafts[row]
        has = d >= 0
        return (
            torch.zeros(length, vocab, dtype=torch.float64).scatter(1, d.clamp_min(0)[:, None], 1.0)
            * has[:, None]
        )
    if group.q is None or not bool(has.any()):
        return None
    starts = sorted(set(where.start[has].tolist()))
    laws = group.q(row, starts)  # [S, B-1, V]
    index = {s: k for k, s in enumerate(starts)}
    q = torch.zeros(length, vocab, dtype=torch.float64)
    for t in torch.nonzero(has).flatten().tolist():
        q[t] = laws[index[int(where.start[t])], int(where.position[t]) - 1]
    return q


def as_seen(group: Group, row: int, where: Places, q):
    """(the q the features read [L, V], the previous acceptance ratio [L]) of each position. Token
    by token: q itself, and a_{t-1} = min(1, p/q) at the draft before. As a block: q / w_{i-1} (the
    block goes on with min(q / w, p)) and w_{i-1}, the prefix weight. At a bonus: the last
    draft's. None without q."""
    if q is None:
        return None, None
    p, tokens = group.target[row], group.tokens[row]
    seen, ratio = q.clone(), torch.ones(q.shape[0], dtype=torch.float64)
    weight = 1.0
    for t in range(1, q.shape[0]):
        i, n = int(where.position[t]), int(where.drafts[t])
        if i <= 1 or int(where.step[t]) < 0:
            weight = 1.0
            continue
        raw = float(p[t - 1, tokens[t - 1]]) / max(float(q[t - 1, tokens[t - 1]]), 1e-300)
        weight = min(1.0, raw if group.token_wise else weight * raw)
        ratio[t] = weight
        seen[t] = (q[t] if i <= n else q[t - 1]) / (1.0 if group.token_wise else max(weight, 1e-3))
    return seen, ratio


def features(group: Group, row: int, q: torch.Tensor | None) -> torch.Tensor:
    """[L, features, V], zero where p is (a tilt keeps p's support)."""
    p, tokens = group.target[row], group.tokens[row]
    length, vocab = p.shape
    support = p > 0
    log_p = torch.where(support, p.clamp_min(1e-300).log(), torch.zeros_like(p))
    phi = torch.zeros(length, len(FEATURES), vocab, dtype=torch.float64)
    if q is not None:
        drafted = q.sum(-1, keepdim=True) > 0
        log_q = q.clamp_min(1e-300).log()
        phi[:, 0] = ((q >= p) & (q > 0)).double()
        phi[:, 1] = torch.where(drafted, (log_q - log_p).clamp(-4, 4), torch.zeros_like(p))
        top = torch.zeros_like(p).scatter(1, q.argmax(-1, keepdim=True), 1.0)
        phi[:, 2] = top * drafted
    phi[:, 3] = log_p.clamp_min(-12)
    before = torch.cat([p[:1], p[:-1]])
    phi[1:, 4] = (before.clamp_min(1e-300).log() - log_p).clamp(-8, 8)[1:]
    counts = torch.nn.functional.one_hot(tokens, vocab).double().cumsum(0)
    phi[1:, 5] = counts[:-1].clamp_max(3)
    return phi * support[:, None]


def log_ratios(p: torch.Tensor, tokens: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """[L, features, thetas]: log p_theta(y_t) - log p_t(y_t), p_theta = p exp(theta phi) / Z."""
    log_p = p.clamp_min(1e-300).log().masked_fill(p <= 0, -math.inf)  # [L, V]
    tilted = log_p[:, None, None, :] + THETAS[None, None, :, None] * phi[:, :, None, :]
    log_z = torch.logsumexp(tilted, -1)  # [L, F, G]
    at = phi.gather(-1, tokens[:, None, None].expand(-1, phi.shape[1], 1))  # [L, F, 1]
    return THETAS * at - log_z


def contexts(group: Group, row: int, where: Places, before, cross: dict, known: bool) -> list[torch.Tensor]:
    """[L] context codes of each family (-1: not counted there)."""
    length = group.tokens.shape[1]
    i, n, step = where.position, where.drafts, where.step
    code = torch.where(i == n + 1, torch.full_like(i, BONUS), i)  # the bonus apart
    placed = (step >= 0) & (i >= 1)
    unknown = torch.full_like(i, -1)
    everything = torch.zeros_like(i)
    position = torch.where(placed | (torch.arange(length) == 0), code, torch.full_like(i, UNPLACED))
    previous = unknown.clone()
    if before is not None:
        bins = torch.bucketize(before, torch.tensor([0.3, 0.6, 0.999999], dtype=torch.float64))
        previous = torch.where(placed & (i >= 2), code * BINS + bins, unknown)
    last_step, others = unknown.clone(), unknown.clone()
    if known:
        counts = group.steps[row].counts
        for t in torch.nonzero(placed).flatten().tolist():
            k, at = int(step[t]), int(i[t])
            last = counts[k - 1] if k > 0 else None
            outcome = 3 if last is None else (0 if at < last else 1 if at == last else 2)
            last_step[t] = int(code[t]) * BINS + outcome
            reached, accepted = cross.get((k, at), (0, 0))
            share = 0 if reached == 0 else 1 + min(2, int(3 * accepted / reached))
            others[t] = int(code[t]) * BINS + share
    return [everything, position, previous, last_step, others]


def remember(cross: dict, steps: Steps, block: int) -> None:
    """Add a completion's steps to what the completions after it see of their batch."""
    for k, m in enumerate(steps.counts):
        n = block - 1 if steps.drafts is None else steps.drafts[k]
        for at in range(1, min(m, n + 1) + 1):
            seen = cross.setdefault((k, at), [0, 0])
            seen[0] += 1
            seen[1] += at < m
