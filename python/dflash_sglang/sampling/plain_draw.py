"""A plain step's token: SGLang's own sampler, as a no-spec server draws it.

A step that verifies no draft (width 1 for the whole batch) has nothing to accept or reject: its
one token a request is the target's next token, and no-spec SGLang draws that in
`Sampler.forward`'s standard path: the adjusted logits over each request's temperature, its softmax
(`torch.softmax` under deterministic inference, else the sampling op's), then `_sample_from_probs`
(top-k / top-p / min-p, a multinomial or, with `--enable-deterministic-inference`, the seeded draw
at the token's position). Here that same path runs on the logits the verify adjusted
(sampling/verify_logits.py: penalties, grammar, logit_bias, custom processors, in no-spec's
order), so the law, the filters and the random stream are no-spec's, and none of the speculative
verify's row laws, coins or residuals run. At temperature 0 the token is the argmax.

The adjusted logits are left as they are (the division makes a new tensor): the request outputs
(logprobs, sampling masks) read them after, as after a speculative verify.
"""

from __future__ import annotations

import torch
from sglang.kernels.ops.sampling import softmax as sampler_softmax

from .accept import Acceptance
from .target_law import is_greedy


def plain_draw(sampler, logits: torch.Tensor, sampling_info, positions: torch.Tensor) -> Acceptance:
    """The token after each request's verified token, through SGLang's sampler (`sampler`: the
    target's `ModelRunner.sampler`). logits: [bs, V] adjusted; positions: [bs] the verified
    tokens' positions (the seeded draw's, as no-spec's decode positions). One token a request."""
    if is_greedy(sampling_info):
        tokens = logits.argmax(-1)
    else:
        scaled = logits / sampling_info.temperatures
        probs = torch.softmax(scaled, dim=-1) if sampler.enable_deterministic else sampler_softmax(scaled)
        simple = not (
            sampling_info.need_top_p_sampling
            or sampling_info.need_top_k_sampling
            or sampling_info.need_min_p_sampling
        )
        tokens, _ = sampler._sample_from_probs(probs, sampling_info, positions, simple)
    tokens = tokens.to(torch.int64).unsqueeze(1)
    return Acceptance(torch.ones_like(tokens[:, 0]), tokens)
