"""Malformed input that SGLang 0.5.23 lets through to the scheduler, refused at the door instead.

A prompt token id outside [0, vocab) reaches the embedding lookup, an empty text prompt
(`"text": ""`, zero tokens) reaches the scheduler, `top_logprobs_num` above the vocabulary size
reaches a top-k, and a `logprob_start_len` below -1 an index: each kills the scheduler (every
user's requests die with it), on a no-spec server as on ours. A sampling `n` that is not a
positive integer (`null`, a float) or is huge (10**12 copies of the request) fails inside SGLang's
request normalisation with a TypeError or MemoryError: a 500. The tokenizer manager validates each
request before sending it on (`_validate_one_request`, whose ValueError becomes a 400 naming the
problem); the first hook adds these checks to it. The plugin loads in every SGLang process, so
no-spec servers with the plugin installed get the same refusals. The `n` check runs before
SGLang's `GenerateReqInput._handle_parallel_sampling`, whose ValueErrors are 400s too.
"""

from __future__ import annotations

TARGET = "sglang.srt.managers.tokenizer_manager.TokenizerManager._validate_one_request"
PARALLEL_SAMPLING_TARGET = "sglang.srt.managers.io_struct.GenerateReqInput._handle_parallel_sampling"
MAX_PARALLEL_SAMPLES = 1024  # OpenAI allows 128; anything near this is a bug in the client


def refuse_requests_that_kill_the_scheduler(original, manager, obj, input_ids):
    """AROUND TokenizerManager._validate_one_request: SGLang's checks, then ours."""
    original(manager, obj, input_ids)
    if input_ids is not None and len(input_ids) == 0:
        raise ValueError("The prompt is empty: at least one input token is needed.")
    vocab = manager.model_config.vocab_size
    bad = [token for token in input_ids or () if not 0 <= token < vocab]
    if bad:
        raise ValueError(
            f"input_ids contains out-of-vocabulary token id {bad[0]}; valid range is [0, {vocab})."
        )
    if not getattr(obj, "return_logprob", False):  # embedding requests have no logprob fields
        return
    top = obj.top_logprobs_num if isinstance(obj.top_logprobs_num, int) else 0
    if top > vocab:
        raise ValueError(f"top_logprobs_num {top} exceeds the vocabulary size ({vocab}).")
    start = obj.logprob_start_len
    if isinstance(start, int) and start < -1:
        raise ValueError(f"logprob_start_len must be -1 (no input logprobs) or a position >= 0, got {start}.")


def refuse_bad_sample_counts(original, request):
    """AROUND GenerateReqInput._handle_parallel_sampling: `n` is an integer in [1, 1024]."""
    params = request.sampling_params
    for each in params if isinstance(params, list) else [params]:
        n = each.get("n", 1) if isinstance(each, dict) else 1
        if type(n) is not int or not 1 <= n <= MAX_PARALLEL_SAMPLES:
            raise ValueError(f"n must be an integer from 1 to {MAX_PARALLEL_SAMPLES}, got {n!r}.")
    return original(request)


HOOKS = (
    (TARGET, refuse_requests_that_kill_the_scheduler),
    (PARALLEL_SAMPLING_TARGET, refuse_bad_sample_counts),
)
