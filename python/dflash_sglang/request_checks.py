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
    if error is None and tree_verify_on():
        return tree_refusal(req)
    return error


def tree_verify_on() -> bool:
    from sglang.srt.runtime_context import get_context

    from .tree_switches import requested_topk

    return requested_topk(get_context().server_args) > 1


def tree_refusal(req) -> str | None:
    """Constrained output reads a chain's positions (SGLang's grammar mask over a linear chain);
    a tree's nodes have paths."""
    params = req.sampling_params
    constrained = ("json_schema", "regex", "ebnf", "structural_tag")
    if req.grammar is not None or any(getattr(params, name, None) for name in constrained):
        return f"{TREE} does not support constrained output yet."
    return None


TREE = "DFLASH tree verification (--speculative-eagle-topk > 1)"
