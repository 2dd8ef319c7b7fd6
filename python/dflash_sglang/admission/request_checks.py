"""Requests our worker refuses, each with a 400 that names the feature, while the server serves on.

SGLang validates every DFLASH request in `validate_dflash_request` (the scheduler aborts a request
with its message). It refuses `return_hidden_states` under the overlap loop only; under the
synchronous loop its worker returns no decode hidden states at all. Ours refuses it in both
loops, with SGLang's own message: the verify captures the drafter's feature layers, not the
final hidden states a no-spec server returns, and a silently partial answer is worse than a 400.
"""

from __future__ import annotations

TARGET = "sglang.srt.speculative.dflash_utils.validate_dflash_request"
HIDDEN_STATES_MESSAGE = "DFLASH speculative decoding does not support return_hidden_states yet."


def refuse_unsupported_requests(original, req, enable_overlap):
    """AROUND validate_dflash_request: SGLang's checks, then ours."""
    error = original(req, enable_overlap)
    if error is None and req.return_hidden_states:
        return HIDDEN_STATES_MESSAGE
    return error
