"""Wrong versions of the sampled verify's own functions, one family a bug class (bug_classes.py).

Each returns a replacement for a function that sampling/sampled_verify.py (or sampled_drafts.py,
penalties.py) looks up in its module when it runs, built from the product's function itself: the
coins from torch.rand, the row laws from `row_laws`, the residual from `final_law`, and so on. So a
planted run is the package's verify with one thing wrong, on whatever logits decode.py gives it.
"""

from __future__ import annotations

import types

import torch

from dflash_sglang.sampling import sampled_drafts, sampled_verify, target_law

from .simulate import NO_TOP_K


class CoinTorch(types.SimpleNamespace):
    """torch, but `rand` passes its [bs, n] coins through `transform(u, generator)` (the verify's
    one torch.rand call: its acceptance coins)."""

    def __init__(self, transform):
        super().__init__(transform=transform)

    def __getattr__(self, name):
        return getattr(torch, name)

    def rand(self, *args, **kwargs):
        return self.transform(torch.rand(*args, **kwargs), kwargs.get("generator"))


def coins_within_block(rho: float):
    """u_i = Phi(z_i), z_i = rho z_{i-1} + sqrt(1 - rho^2) e_i: each coin correlated with the last."""

    def transform(u, generator):
        z = torch.special.ndtri(u.double().clamp(1e-12, 1 - 1e-12))
        for i in range(1, z.shape[1]):
            z[:, i] = rho * z[:, i - 1] + (1 - rho**2) ** 0.5 * z[:, i]
        return torch.special.ndtr(z).to(u.dtype)

    return CoinTorch(transform)


def coins_across_requests(group: int):
    """Requests in groups of `group` rows share the first row's coins (0: the whole batch)."""

    def transform(u, generator):
        rows = torch.arange(u.shape[0])
        return u[(rows // group) * group if group else torch.zeros_like(rows)]

    return CoinTorch(transform)


def coins_across_steps(keep: float):
    """Each batch row keeps its last step's coins with probability `keep` (a generator reseeded)."""
    last: list[torch.Tensor] = []

    def transform(u, generator):
        if last and last[0].shape[1] == u.shape[1]:
            before = last[0][: u.shape[0]]
            held = torch.rand(before.shape, generator=generator) < keep
            u[: before.shape[0]] = torch.where(held, before, u[: before.shape[0]])
        last[:] = [
            u.clone() if not last or u.shape[0] >= last[0].shape[0] else torch.cat([u, last[0][u.shape[0] :]])
        ]
        return u

    return CoinTorch(transform)


def info_with(info, **changes):
    """SGLang's SamplingBatchInfo fields (decode.sampling_info's), some changed."""
    return types.SimpleNamespace(**{**vars(info), **changes})


def unfiltered(info):
    rows = info.temperatures.shape[0]
    return info_with(
        info, top_ks=torch.full((rows,), NO_TOP_K, dtype=torch.int32), top_ps=torch.ones(rows),
        min_ps=torch.zeros(rows), need_top_k_sampling=False, need_top_p_sampling=False,
        need_min_p_sampling=False, max_top_k=None,
    )  # fmt: skip


def drafts_drawn_otherwise(how: str, value: float):
    """draw_drafts whose drafts come from another law than the q it reports: `temperature` (the
    draw at value x T), `argmax` (every position from `value` on the argmax of q), `unfiltered`,
    `shifted` (position i drawn from position i + 1's logits). q(d) is reported for the drafts drawn."""
    draw = sampled_drafts.draw_drafts

    def planted(features, logits_of, info, vocab, reqs=None, generator=None):
        reported_drafts, proposal = draw(features, logits_of, info, vocab, reqs, generator)
        if how == "temperature":
            drafts, _ = draw(features, logits_of, info_with(info, temperatures=info.temperatures * value),
                             vocab, reqs, generator)  # fmt: skip
        elif how == "unfiltered":
            drafts, _ = draw(features, logits_of, unfiltered(info), vocab, reqs, generator)
        elif how == "shifted":
            drafts, _ = draw(
                torch.cat([features[:, 1:], features[:, -1:]], 1), logits_of, info, vocab, reqs, generator
            )
        else:  # argmax from position `value` on
            drafts = reported_drafts.clone()
            top = logits_of(features.flatten(0, 1)).float().argmax(-1).view(drafts.shape)
            drafts[:, int(value) :] = top[:, int(value) :]
        bs, size = drafts.shape
        rows = torch.arange(bs * size)
        scaled = logits_of(features.flatten(0, 1)).float() / proposal.law.temperature.unsqueeze(-1)
        at = scaled.gather(-1, drafts.view(-1, 1))
        q_draft = proposal.law.log_prob(at, rows).exp().view(bs, size)
        return drafts, sampled_drafts.DraftProposal(q_draft, features, proposal.law, logits_of)

    return planted


def rows_law_otherwise(positions: list[int], how: str, value: float):
    """row_laws with the law of the block positions `positions` (0 .. B-1; B-1 the bonus row) at
    value x the temperature, its top_p moved by `value`, its min_p times `value`, or unfiltered."""
    row_laws = target_law.row_laws

    def planted(logits, info, block_size, plan):
        law = row_laws(logits, info, block_size, plan)
        if how == "temperature":
            wrong = info_with(info, temperatures=info.temperatures * value)
        elif how == "top_p":
            wrong = info_with(info, top_ps=(info.top_ps + value).clamp(0.05, 1.0), need_top_p_sampling=True)
        elif how == "min_p":
            wrong = info_with(info, min_ps=(info.min_ps * value).clamp(0.0, 0.9))
        else:
            wrong = unfiltered(info)
        bug = row_laws(logits, wrong, block_size, target_law.plan_for(wrong, logits.shape[-1]))
        at = torch.isin(torch.arange(logits.shape[0]) % block_size, torch.tensor(positions))
        fields = ("temperature", "cut", "log_norm")
        return target_law.RowLaw(*(torch.where(at, getattr(bug, f), getattr(law, f)) for f in fields))

    return planted


def penalty_otherwise(positions: list[int], factor: float, name: str = "apply_block_penalties"):
    """apply_block_penalties (or a tree's apply_tree_penalties, `name`) with the penalty at the
    block positions (the tree's nodes) `positions` times `factor`."""
    from dflash_sglang.sampling import penalties

    apply = getattr(penalties, name)

    def planted(logits, block_or_tree, counts, lengths, params):
        before = logits.clone()
        apply(logits, block_or_tree, counts, lengths, params)
        at = torch.tensor(positions)
        logits[:, at] = before[:, at] + factor * (logits[:, at] - before[:, at])

    return planted


def residual_otherwise(how: str, value: float):
    """final_law (sampled drafts' draw after a rejection) with q scaled by `value`, mixed with p
    at weight `value`, p at the power `value` before the subtraction, or the weight set to 1."""
    final_law = sampled_verify.final_law

    def planted(weight, p_at, q_at, bonus):
        if how == "q scaled":
            return final_law(weight, p_at, q_at * value, bonus)
        if how == "p power":
            return final_law(weight, normalised(p_at**value), q_at, bonus)
        if how == "no weight":
            return final_law(torch.ones_like(weight), p_at, q_at, bonus)
        right = final_law(weight, p_at, q_at, bonus)
        return torch.where(bonus.unsqueeze(-1), right, (1 - value) * right + value * p_at)

    return planted


def normalised(probs: torch.Tensor) -> torch.Tensor:
    return probs / probs.sum(-1, keepdim=True).clamp_min(1e-30)


def point_residual_otherwise(how: str, value: float):
    """final_probs (point drafts' draw after a rejection) mixed with p at weight `value` (1: the
    rejected draft kept), or at the power `value`; the bonus right."""
    final_probs = sampled_verify.final_probs

    def planted(law, logits, drafts, accepted, p_draft, draft_counts=None):
        right = final_probs(law, logits, drafts, accepted, p_draft, draft_counts)
        bonus = (accepted >= drafts.shape[1]).unsqueeze(-1)
        if how == "p power":
            return torch.where(bonus, right, normalised(right**value))
        p_at = sampled_verify.target_rows(law, logits, accepted, drafts.shape[1])
        return torch.where(bonus, right, (1 - value) * right + value * p_at)

    return planted


def bonus_otherwise(how: str, value: float, point: bool):
    """The bonus after a whole block drawn from a mixture, weight `value`, with the last draft's
    row (`row`), at the power `value` (`power`), or (sampled drafts) from the residual of the last
    position's q (`residual`): final_probs for point drafts, target_rows / final_law for sampled."""
    if point:
        final_probs = sampled_verify.final_probs

        def planted_point(law, logits, drafts, accepted, p_draft, draft_counts=None):
            right = final_probs(law, logits, drafts, accepted, p_draft, draft_counts)
            n = drafts.shape[1]
            bonus = (accepted >= n).unsqueeze(-1)
            if how == "power":
                return torch.where(bonus, normalised(right**value), right)
            last = sampled_verify.target_rows(law, logits, accepted.clamp_max(n - 1), n)
            return torch.where(bonus, (1 - value) * right + value * last, right)

        return "final_probs", planted_point
    if how == "residual":
        final_law = sampled_verify.final_law
        return "final_law", lambda weight, p_at, q_at, bonus: final_law(weight, p_at, q_at, bonus & False)
    target_rows = sampled_verify.target_rows

    def planted(law, logits, position, n_draft):
        right = target_rows(law, logits, position, n_draft)
        bonus = (position >= n_draft).unsqueeze(-1)
        if how == "power":
            return torch.where(bonus, normalised(right**value), right)
        last = target_rows(law, logits, position.clamp_max(n_draft - 1), n_draft)
        return torch.where(bonus, (1 - value) * right + value * last, right)

    return "target_rows", planted


def acceptance_otherwise(how: str, value: float):
    """draft_probs (the p(d) every acceptance test reads) at the power `value`, or times `value`."""
    draft_probs = sampled_verify.draft_probs

    def planted(law, logits, drafts):
        p = draft_probs(law, logits, drafts)
        return p**value if how == "power" else (p * value).clamp_max(1.0)

    return planted


def rejected_q_otherwise(offset: int):
    """rejected_q reading q `offset` positions away from the rejected one (cyclically)."""

    def planted(proposal, accepted, vocab, draft_counts):
        n = proposal.q_draft.shape[1]
        q_at = proposal.rows((accepted.clamp_max(n - 1) + offset) % n, vocab)
        if draft_counts is not None:
            q_at.mul_((accepted < draft_counts).unsqueeze(1))
        return q_at

    return planted


# ---- trees: the target's draw at every node (target_law.draw_every_row) and the walk -------------


class NodeDrawTorch(types.SimpleNamespace):
    """torch, but `multinomial(probs, 1)` (draw_every_row's one draw a node) by the inverse CDF of
    uniforms [bs, nodes] passed through `transform(u, generator)`: a coin class on a tree's draws.
    Exact with the identity: each row's token is its law's quantile at an independent uniform."""

    def __init__(self, transform, nodes: int):
        super().__init__(transform=transform, nodes=nodes)

    def __getattr__(self, name):
        return getattr(torch, name)

    def multinomial(self, probs, num_samples, *args, **kwargs):
        rows = probs.shape[0]
        u = torch.rand(rows, dtype=torch.float64)
        if rows % self.nodes == 0:  # one chunk a batch here (the toy's vocabulary is small)
            u = self.transform(u.view(-1, self.nodes), None).reshape(rows)
        cdf = probs.double().cumsum(-1)
        tokens = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1)).clamp_max(probs.shape[-1] - 1)
        return tokens.view(rows, num_samples)


def tree_bonus_from_the_root(share: float):
    """follow_batch whose bonus, in a share `share` of the requests that accepted a draft, is the
    root's draw (the target's token after the sequence, not after the accepted path)."""
    from dflash_sglang.tree import verify as tree_verify

    follow = tree_verify.follow_batch

    def planted(tree, predictions):
        walk = follow(tree, predictions)
        wrong = (walk.last > 0) & (torch.rand(walk.last.shape) < share)
        return walk._replace(bonus=torch.where(wrong, predictions[:, 0], walk.bonus))

    return planted
