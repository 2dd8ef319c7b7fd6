"""What the scheduler reads from a decode step's result, besides the tokens.

The scheduler unpacks a speculative result row by row: request i's tokens are `tokens[i, :len]`
of the padded [bs, B] layout, and everything a request asked for must come in the same layout
(`chain_stride = B`). Each field is built with the SGLang helper its own DFLASH worker calls:

    return_logprob / top_logprobs_num / token_ids_logprob
                      `compute_spec_logprobs` over the adjusted verify logits, so the values are
                      the ones the no-spec sampler reports (after penalties, grammar, bias)
    return_sampling_mask
                      `SpeculativeSamplingMaskCapture` of the verified target policy
    routed experts, DSA indexer top-k
                      the target's verify forward's own outputs, passed through
    return_hidden_states
                      refused per request (admission/request_checks.py): the verify captures the drafter's
                      feature layers, not the final hidden states a no-spec server returns
"""

from __future__ import annotations

import torch
from sglang.srt.layers.logprob_processor import compute_spec_logprobs
from sglang.srt.speculative.spec_sampling_mask import SpeculativeSamplingMaskCapture


def attach_request_outputs(
    batch, logits_output, tokens: torch.Tensor, lengths: torch.Tensor, block_size: int
) -> None:
    """Fill `logits_output`'s per-request fields for the step that emitted `tokens[i, :lengths[i]]`."""
    bs = tokens.shape[0]
    capture = SpeculativeSamplingMaskCapture.from_logits(
        batch.sampling_info,
        next_token_logits=logits_output.next_token_logits,
        draft_input=batch.spec_info,
        draft_token_num=block_size,
        bs=bs,
    )
    if capture is not None:
        logits_output.sampling_mask_output = capture.build_output(out_tokens=tokens, commit_lens=lengths)
    if batch.return_logprob:
        compute_spec_logprobs(batch, logits_output, tokens.reshape(-1), chain_stride=block_size)
