"""The classic bugs of speculative sampling, each an edit of one file of the package.

A bug is planted into a copy of `dflash_sglang` (plant.py), never into the product: a test or a
server started with that copy first on PYTHONPATH runs the bug. Each edit names the exact text it
replaces, and tests/test_planted_bugs.py checks that the text is still there, so the catalogue
cannot silently stop planting anything as the package changes.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Edit:
    file: str  # relative to the package's root
    old: str  # exact text, found once
    new: str


@dataclasses.dataclass(frozen=True)
class Bug:
    file: str  # relative to the package's root
    old: str  # exact text, found once
    new: str
    what: str  # the bug in words
    paths: str  # the decoding paths that run the edited code
    # The same bug where another backend computes the same thing (the CUDA row-law kernel,
    # sampling/row_law_triton.py), planted with the edit above: every path carries it.
    twins: tuple[Edit, ...] = ()

    @property
    def edits(self) -> tuple[Edit, ...]:
        return (Edit(self.file, self.old, self.new), *self.twins)


SAMPLED_VERIFY = "sampling/sampled_verify.py"
TARGET_LAW = "sampling/target_law.py"
SAMPLED_DRAFTS = "sampling/sampled_drafts.py"
ROW_LAW_TRITON = "sampling/row_law_triton.py"
ACCEPT_TRITON = "sampling/accept_triton.py"
# accept_triton's texts the acceptance and draw twins edit (sampled_verify's CUDA branch).
Q_DRAFT = "            u = u * tl.load(q_draft_ptr + req * n_draft + i)\n"
DROP = "        drop = drop.to(torch.int32)\n"


def point_only(line: str) -> Edit:
    """A twin in the accept kernel for point drafts alone (q_draft_ptr None): `line` edits p."""
    return Edit(ACCEPT_TRITON, Q_DRAFT, Q_DRAFT + "        else:\n            " + line + "\n")


BUGS = {
    "no_residual": Bug(
        SAMPLED_VERIFY,
        'log_p.scatter_(1, d_at, torch.where(drop, float("-inf"), log_p.gather(1, d_at)))',
        "pass",
        "the resample keeps the rejected draft (draws from p, not from the residual)",
        "chain",
        twins=(Edit(ACCEPT_TRITON, DROP, "        drop = torch.zeros_like(drop, dtype=torch.int32)\n"),),
    ),
    "accept_sqrt_p": Bug(
        SAMPLED_VERIFY,
        "accepted_prefix_length(uniform < p_draft)",
        "accepted_prefix_length(uniform < p_draft.sqrt())",
        "drafts accepted with probability sqrt(p)",
        "chain",
        twins=(point_only("p = tl.sqrt(p)"),),
    ),
    "accept_p_squared": Bug(
        SAMPLED_VERIFY,
        "accepted_prefix_length(uniform < p_draft)",
        "accepted_prefix_length(uniform < p_draft.square())",
        "drafts accepted with probability p^2",
        "chain",
        twins=(point_only("p = p * p"),),
    ),
    "draft_temperature_off": Bug(
        TARGET_LAW,
        "temperature = per_row(sampling_info.temperatures.float())",
        "temperature = per_row(sampling_info.temperatures.float()) * torch.where("
        "torch.arange(rows, device=logits.device) % block_size < block_size - 1, 1.1, 1.0)",
        "the temperature 10% too high at every row that verifies a draft (the bonus row right)",
        "chain, sampled chain, tree",
    ),
    "accept_p_power_0_91": Bug(
        SAMPLED_VERIFY,
        "return law.log_prob(scaled.flatten().unsqueeze(-1), at.flatten()).exp().view(bs, n_draft)",
        "return law.log_prob(scaled.flatten().unsqueeze(-1), at.flatten()).div(1.1).exp().view(bs, n_draft)",
        "drafts accepted with p(d) ** (1 / 1.1) (the draw after a rejection right): a mild tilt",
        "chain",
        twins=(
            Edit(
                ACCEPT_TRITON,
                "tl.exp(s - tl.load(log_norm_ptr + row))",
                "tl.exp((s - tl.load(log_norm_ptr + row)) / 1.1)",
            ),
        ),
    ),
    "bonus_wrong_position": Bug(
        SAMPLED_VERIFY,
        "row = torch.arange(bs, device=logits.device) * (n_draft + 1) + accepted",
        "row = torch.arange(bs, device=logits.device) * (n_draft + 1) + accepted.clamp_max(n_draft - 1)",
        "after a fully accepted block the bonus token is drawn from the last draft's row",
        "chain",
        twins=(
            Edit(
                ACCEPT_TRITON,
                "law  # unused\n",
                "law  # unused\n        accepted = accepted.clamp_max(n_draft - 1)\n",
            ),
        ),
    ),
    "filter_before_temperature": Bug(
        TARGET_LAW,
        "cut[part] = row_cut(scaled, top_k[part], top_p[part], min_p[part], plan)",
        "cut[part] = row_cut(logits[part].float(), top_k[part], top_p[part], min_p[part], plan)"
        " / temperature[part]",
        "top_p (and min_p) measured on the probabilities before the temperature",
        "chain, sampled chain, tree",
        twins=(  # the kernel's search masses at temperature 1, its min-p floor log(min_p) / T
            Edit(ROW_LAW_TRITON, "e = tl.exp(s - row_max)", "e = tl.exp((s - row_max) * temperature)"),
            Edit(
                ROW_LAW_TRITON,
                "floor = row_max + tl.load(log_min_p_ptr + row)",
                "floor = row_max + tl.load(log_min_p_ptr + row) / temperature",
            ),
        ),
    ),
    "min_p_wrong_maximum": Bug(
        TARGET_LAW,
        "floor = ordered[:, 0] + torch.log(min_p)",
        "floor = ordered[:1, 0] + torch.log(min_p)",
        "min_p measured against the first row's maximum (another position's or request's)",
        "chain, sampled chain, tree",
        twins=(  # the kernel's floor max_r + log(min_p) shifted to the first row's max
            Edit(
                ROW_LAW_TRITON,
                "log_min_p = torch.log(min_p.float()) if plan.min_p",
                "log_min_p = torch.log(min_p.float()) + (lambda m: m[:1] - m)("
                "(logits.float() / temperature.float().unsqueeze(-1)).amax(-1)) if plan.min_p",
            ),
        ),
    ),
    "stale_frequency_penalty": Bug(
        "sampling/penalties.py",
        "j, k = torch.triu_indices(size, size, device=device)",
        "j, k = torch.triu_indices(size, size, offset=1, device=device)",
        "a draft's own penalty reaches the positions after it one token late (stale inside a block)",
        "chain, sampled chain",
    ),
    "tree_node_wrong_row": Bug(
        TARGET_LAW,
        "drawn[part] = torch.multinomial(probs, 1).view(-1)",
        "drawn[part] = torch.multinomial(probs.roll(1, 0), 1).view(-1)",
        "each tree node's sample drawn from the row before it (another node's law)",
        "tree",
    ),
    "hybrid_wrong_state": Bug(
        "step/hybrid.py",
        "last = accepted.to(torch.int64) - 1",
        "last = (accepted.to(torch.int64) - 2).clamp_min(0)",
        "a hybrid target commits the recurrent state of the node before the last accepted one",
        "hybrid",
    ),
    # The ReplaySSM commit (step/hybrid.py `replay`, DFLASH_SGLANG_REPLAY_SSM=1): SGLang folds what
    # we tell it was accepted and rolls the conv window back to the step we name.
    "replay_fold_one_short": Bug(
        "step/hybrid.py",
        "accept_lens=lengths,",
        "accept_lens=(lengths - 1).clamp_min(1),",
        "the ring folds one record short: the SSM state a token stale (the conv window right)",
        "hybrid",
    ),
    "replay_rejected_draft_folded": Bug(
        "step/hybrid.py",
        "accept_lens=lengths,",
        "accept_lens=lengths + 1,",
        "the ring folds one record past the accepted prefix: a rejected draft's update in the state",
        "hybrid",
    ),
    "replay_conv_not_rolled_back": Bug(
        "step/hybrid.py",
        "prepared_step_indices=(last, steps_to_track),",
        "prepared_step_indices=(torch.full_like(last, -1), steps_to_track),",
        "the conv window is not rolled to the accepted step: it stays as before the verify",
        "hybrid",
    ),
    "sampled_residual_from_p": Bug(
        SAMPLED_VERIFY,
        "return final_law(weight, p_at, q_at, accepted >= n_draft)",
        "return final_law(weight, p_at, q_at * 0, accepted >= n_draft)",
        "sampled drafts: the draw after a rejection from p, not from normalise(max(p - q, 0))",
        "sampled chain",
        twins=(
            Edit(ACCEPT_TRITON, "tl.maximum(weight * p - q, 0.0)", "tl.maximum(weight * p - q * 0.0, 0.0)"),
        ),
    ),
    "sampled_accept_sqrt": Bug(
        SAMPLED_VERIFY,
        "accepted_prefix_length(uniform * proposal.q_draft < p_draft)",
        "accepted_prefix_length(uniform * proposal.q_draft.sqrt() < p_draft.sqrt())",
        "sampled drafts kept with probability min(1, sqrt(p / q))",
        "sampled chain",
        twins=(
            Edit(
                ACCEPT_TRITON,
                Q_DRAFT,
                Q_DRAFT.replace("u * tl.load", "u * tl.sqrt(tl.load").replace("i)\n", "i))\n")
                + "            p = tl.sqrt(p)\n",
            ),
        ),
    ),
    "sampled_q_wrong_position": Bug(
        SAMPLED_VERIFY,
        "q_at = proposal.rows(accepted.clamp_max(n_draft - 1), vocab)",
        "q_at = proposal.rows((accepted + 1) % n_draft, vocab)",
        "sampled drafts: the residual after a rejection takes q from the next position",
        "sampled chain",
        twins=(
            Edit(
                SAMPLED_VERIFY,
                "logits_at(accepted.clamp_max(n_draft - 1))",
                "logits_at((accepted + 1) % n_draft)",
            ),
        ),
    ),
    "sampled_q_unnormalised": Bug(
        SAMPLED_DRAFTS,
        "del scaled\n        log_norm[part] = torch.logsumexp(kept, dim=-1)",
        "log_norm[part] = torch.logsumexp(scaled, dim=-1)\n        del scaled",
        "sampled drafts: q normalised over the whole vocabulary, not over its filter's kept set",
        "sampled chain",
    ),
    "ragged_bonus_from_residual": Bug(
        SAMPLED_VERIFY,
        "q_at.mul_((accepted < draft_counts).unsqueeze(1))",
        "q_at.mul_(1)",
        "per-request lengths, sampled drafts (token by token or as a block): a request that kept all "
        "its own drafts draws its bonus from the residual of its next draft, not from p",
        "ragged",
        twins=(
            Edit(
                SAMPLED_VERIFY,
                "counts=draft_counts\n    )",
                "counts=draft_counts if q is None else None\n    )",
            ),
        ),
    ),
}
