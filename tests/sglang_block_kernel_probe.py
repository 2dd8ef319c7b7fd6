"""SGLang's block verification kernel (`chain_speculative_sampling_triton(block_verification=True)`,
Triton, run by its interpreter on CPU: `TRITON_INTERPRET=1`, set by test_block_verify.py before
Triton loads) against sampling/block_verify.py, with the same probabilities and the same uniforms:
the accepted length of every request, and the token the target adds (the kernel inverts the final
law's CDF at its uniform; ours is inverted here at the same one).

Prints a JSON report as the last stdout line.
"""

import json

import torch

from dflash_sglang.sampling.block_verify import (
    accepted_block_length,
    final_law,
    prefix_weights,
    residual_mass,
)


def random_case(bs: int, n: int, vocab: int, generator: torch.Generator, spread: float):
    """Target and draft laws close enough that long prefixes are accepted, drafts drawn from q."""
    base = torch.randn(bs, n + 1, vocab, generator=generator) * spread
    target = torch.softmax(base, -1)
    draft = torch.softmax(base[:, :n] + torch.randn(bs, n, vocab, generator=generator) * 0.5, -1)
    drafts = torch.multinomial(draft.reshape(-1, vocab), 1, generator=generator).view(bs, n)
    return target, draft, drafts


def sglang_kernel(target, draft, drafts, uniform, uniform_final):
    from sglang.kernels.ops.speculative.reject_sampling import chain_speculative_sampling_triton

    bs, n = drafts.shape
    candidates = torch.cat([torch.zeros(bs, 1, dtype=torch.int64), drafts], dim=1)
    retrieve = torch.arange(bs * (n + 1)).view(bs, n + 1)
    predicts = torch.full((bs * (n + 1),), -1, dtype=torch.int64)
    accept_index = torch.full((bs, n + 1), -1, dtype=torch.int64)
    accepted = torch.zeros(bs, dtype=torch.int64)
    chain_speculative_sampling_triton(
        predicts, accept_index, accepted, candidates, retrieve, None, None, uniform, uniform_final,
        target, draft, None, None, None, block_verification=True,
    )  # fmt: skip
    final = predicts.view(bs, n + 1).gather(1, accepted.unsqueeze(1)).squeeze(1)
    return accepted, final


def ours(target, draft, drafts, uniform, uniform_final):
    bs, n = drafts.shape
    index = drafts.unsqueeze(-1)
    weights = prefix_weights(
        target[:, :-1].gather(-1, index).squeeze(-1), draft.gather(-1, index).squeeze(-1)
    )
    masses = torch.stack([residual_mass(weights[:, i], target[:, i], draft[:, i]) for i in range(n)], 1)
    accepted = accepted_block_length(weights, masses, uniform)
    at = accepted.view(bs, 1, 1).expand(bs, 1, target.shape[-1])
    q_at = torch.cat([draft, torch.zeros_like(draft[:, :1])], 1).gather(1, at).squeeze(1)
    law = final_law(
        weights.gather(1, accepted.unsqueeze(1)).squeeze(1),
        target.gather(1, at).squeeze(1),
        q_at,
        accepted >= n,
    )
    final = torch.searchsorted(law.cumsum(-1), uniform_final.unsqueeze(1), right=True).squeeze(1)
    return accepted, final.clamp_max(target.shape[-1] - 1)


def main():
    generator = torch.Generator().manual_seed(0)
    report = {"requests": 0, "lengths_differ": 0, "tokens_differ": 0, "lengths": {}}
    for n, vocab, spread in [(3, 7, 1.0), (7, 50, 2.0), (15, 300, 3.0)]:
        target, draft, drafts = random_case(64, n, vocab, generator, spread)
        uniform = torch.rand(64, n, generator=generator)
        uniform_final = torch.rand(64, generator=generator)
        theirs_len, theirs_tok = sglang_kernel(target, draft, drafts, uniform, uniform_final)
        our_len, our_tok = ours(target, draft, drafts, uniform, uniform_final)
        report["requests"] += 64
        report["lengths_differ"] += int((theirs_len != our_len).sum())
        report["tokens_differ"] += int((theirs_tok != our_tok).sum())
        report["lengths"][str(n)] = torch.bincount(our_len, minlength=n + 1).tolist()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
