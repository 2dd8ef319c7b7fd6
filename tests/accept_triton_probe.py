"""The token-wise sampled verify's Triton kernels (sampling/accept_triton.py) against the torch path
(sampling/sampled_verify.py), run by Triton's interpreter on CPU (`TRITON_INTERPRET=1`, set by
test_accept_triton.py before Triton loads), with the same uniforms.

Per case: the accepted lengths (kernel `accept` vs accepted_prefix_length over draft_probs), and
the added token: the kernel's inverse-CDF draw against the inverse CDF of the torch path's own final
law (final_probs for point drafts, rejected_q + sampled_final_probs for sampled drafts) at the
same uniform. Prints a JSON report as the last stdout line.
"""

import json
import sys
from pathlib import Path

import torch

from dflash_sglang.sampling import accept_triton
from dflash_sglang.sampling.accept import accepted_prefix_length
from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import (
    draft_probs,
    final_probs,
    rejected_q,
    sampled_final_probs,
    within,
)
from dflash_sglang.sampling.target_law import RowLaw, plan_for, row_laws

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from tests.planted.simulate import sampling_info  # noqa: E402

BS, BLOCK, H = 64, 6, 32
FILTERS = {
    "cards": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
    "top_p": {"temperature": 1.0, "top_p": 0.9},
    "min_p": {"temperature": 0.8, "min_p": 0.05},
    "temperature": {"temperature": 1.3},
}


VARIANTS = [  # (sampled, ragged, weighted)
    (False, False, False), (False, True, False),
    (True, False, False), (True, True, False), (True, False, True),
]  # fmt: skip


def case(vocab: int, params: dict, seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, H, generator=g) / H**0.5
    features = torch.randn(BS, BLOCK - 1, H, generator=g) * 3
    logits = torch.randn(BS, BLOCK, vocab, generator=g)
    logits[:, :-1] += features @ weight.T  # the target near the drafter: both outcomes occur
    info = sampling_info(params, BS)

    def head(x):
        return (x @ weight.T).float()

    drafts, proposal = draw_drafts(features, head, info, vocab, generator=g)
    logits = logits.view(BS * BLOCK, vocab).to(dtype)
    uniform = torch.rand(BS, BLOCK - 1, generator=g)
    final_u = torch.rand(BS, generator=g)
    return logits, info, drafts, proposal, uniform, final_u


def inverse_cdf(law: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return (
        torch.searchsorted(law.cumsum(-1), u.unsqueeze(1), right=True).squeeze(1).clamp_max(law.shape[-1] - 1)
    )


def compare(vocab, params, seed, sampled, ragged, weighted, dtype=torch.float32) -> dict:
    logits, info, drafts, proposal, uniform, final_u = case(vocab, params, seed, dtype)
    n = BLOCK - 1
    counts = torch.arange(BS) % BLOCK if ragged else None
    law = row_laws(logits, info, BLOCK, plan_for(info, vocab))
    p_draft = draft_probs(law, logits, drafts)
    q_draft = proposal.q_draft if sampled else None
    ok = uniform * q_draft < p_draft if sampled else uniform < p_draft
    accepted = within(accepted_prefix_length(ok), counts)
    kernel_accepted = accept_triton.accept(logits, law, drafts, uniform, q_draft, counts)
    weight = torch.rand(BS).clamp_min(0.05) if weighted else None
    if sampled:
        q_at = rejected_q(proposal, accepted, vocab, counts)
        w = None if weight is None else weight.view(-1, 1)
        final = sampled_final_probs(law, logits, q_at, accepted, n, w)
        flat = torch.arange(BS) * n + accepted.clamp_max(n - 1)
        q_logits = head_rows(proposal, accepted.clamp_max(n - 1))
        q_law = RowLaw(proposal.law.temperature[flat], proposal.law.cut[flat], proposal.law.log_norm[flat])
        token = accept_triton.draw(
            logits, law, drafts, accepted, final_u, q=(q_logits, q_law), weight=weight, counts=counts
        )
    else:
        final = final_probs(law, logits, drafts, accepted, p_draft, counts)
        token = accept_triton.draw(logits, law, drafts, accepted, final_u, p_draft=p_draft, counts=counts)
    reference = inverse_cdf(final, final_u)
    differs = token != reference
    # A differing token must be a rounding tie: the uniform within float error of a CDF boundary.
    cdf = final.cumsum(-1)
    gap = (cdf - final_u.unsqueeze(1)).abs().min(-1).values
    return {
        "accepted_differ": int((kernel_accepted != accepted).sum()),
        "tokens_differ": int(differs.sum()),
        "tokens_differ_off_boundary": int((differs & (gap > 1e-5)).sum()),
        "accepted_spread": [int(accepted.min()), int(accepted.max())],
        "rejected": int((accepted < (n if counts is None else counts)).sum()),
        "token_prob_zero": int((final.gather(1, token.unsqueeze(1)).squeeze(1) <= 0).sum()),
        "control_differ": int((token != inverse_cdf(final, 1.0 - final_u)).sum()),  # another uniform
    }


def head_rows(proposal, position):
    """The drafter's logits at one draft row per request (one LM-head product)."""
    return proposal.logits_of(proposal.features[torch.arange(position.shape[0]), position])


def main():
    report = {}
    seed = 0
    for vocab in (300, 2500):
        for name, params in FILTERS.items() if vocab == 300 else [("cards", FILTERS["cards"])]:
            for sampled, ragged, weighted in VARIANTS:
                seed += 1
                key = f"V{vocab} {name} {'sampled' if sampled else 'point'}{' ragged' if ragged else ''}"
                report[key + (" weighted" if weighted else "")] = compare(
                    vocab, params, seed, sampled, ragged, weighted
                )
    report["V300 cards sampled bf16"] = compare(300, FILTERS["cards"], 99, True, False, False, torch.bfloat16)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
