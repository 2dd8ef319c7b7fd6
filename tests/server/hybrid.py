"""Shared pieces of the hybrid-target server tests: the tiny Qwen3.5-style pair, the server flags a
hybrid target needs on CPU, the prompts, and transformers' greedy decoding as the reference."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

BLOCK = 8
MAX_NEW = 40
# 1-130 tokens: inside, at and across the 64-token chunks of the prefill and of the state tracking.
PROMPT_LENGTHS = [1, 5, 9, 31, 70, 130]
TRACK_INTERVAL = 64  # extra_buffer snapshots the state every 64 tokens, so short requests cross it

# Exact float32 comparisons need the conv state in float32 (SGLang keeps it in bfloat16 otherwise).
HYBRID_ENV = {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
# A bounded state pool: the default sizes it from the machine's memory (gigabytes for a tiny model).
# 256 slots, not 32: extra_buffer holds 3 a request (144 for 48 running), so 32 ran a law batch
# (128 requests) about 10 at a time; 256 lets it run SGLang's 48 at once (26 s -> 11 s a batch).
HYBRID_ARGS = ["--max-mamba-cache-size", "256"]
NO_BUFFER = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
EXTRA_BUFFER = ["--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", TRACK_INTERVAL]


def make_hybrid_pair(root: Path, experts: int = 0):
    shape = HybridShape(hot_tokens=3, experts=experts)
    return write_tiny_hybrid_pair(root, seed=0, block_size=BLOCK, shape=shape)


def prompts() -> list[list[int]]:
    # Token ids 10..299: clear of the special tokens (0-3) and inside the 384-token vocabulary.
    return [[10 + (7 * i + 13 * n) % 290 for i in range(n)] for n in PROMPT_LENGTHS]


@functools.lru_cache(maxsize=2)
def load_target(path: Path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def greedy(target_path: Path, input_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own decoding, prefill then one token at a time through its hybrid cache."""
    model = load_target(target_path)
    out = model(torch.tensor([input_ids]), use_cache=True)
    cache, tokens = out.past_key_values, []
    for _ in range(max_new_tokens):
        tokens.append(int(out.logits[0, -1].argmax()))
        out = model(torch.tensor([tokens[-1:]]), past_key_values=cache, use_cache=True)
    return tokens


def generate(server, input_ids, max_new_tokens: int = MAX_NEW) -> dict:
    """Greedy, ignoring EOS, so every request runs its full length like the reference."""
    return server.generate(input_ids, max_new_tokens, ignore_eos=True)


# The verify runs the chunked delta rule over a block where no-spec runs one recurrent step per
# token: float32 sums in another order drift logprobs by about 1e-4 over 20 tokens (tokens equal).
HYBRID_LOGPROB_TOLERANCE = 1e-3
FEATURES = ["top_logprobs_num", "json_schema", "regex", "additive_penalties", "min_new_tokens", "logit_bias"]


def assert_request_features_equal_nospec(server, nospec) -> None:
    """The request-feature matrix's core (test_request_features.py): logprobs, constrained output
    and penalties equal a no-spec hybrid server's, one at a time and together."""
    from .test_request_features import CASES, assert_same, comparable, send

    bodies = {name: {**CASES[name][1], "input_ids": prompts()[3]} for name in FEATURES}
    for name, body in bodies.items():
        want = comparable(send(nospec, "/generate", body))
        assert_same(comparable(send(server, "/generate", body)), want, name, HYBRID_LOGPROB_TOLERANCE)
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda body: send(server, "/generate", body), bodies.values()))
    for (name, body), got in zip(bodies.items(), together, strict=True):
        want = comparable(send(nospec, "/generate", body))
        assert_same(comparable(got), want, name, HYBRID_LOGPROB_TOLERANCE)


def assert_alone_and_concurrent_equal(server, expected) -> None:
    """prompts() one at a time and all at once equal `expected` (the target alone), drafts accepted."""
    alone = [generate(server, ids) for ids in prompts()]
    assert [out["output_ids"] for out in alone] == expected
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # drafts were accepted
    with ThreadPoolExecutor(len(expected)) as pool:
        together = list(pool.map(lambda ids: generate(server, ids), prompts()))
    assert [out["output_ids"] for out in together] == expected


def assert_extension_equals_the_target(server, target, expected, radix: bool = True) -> None:
    """Each prompt extended by 30 of its output tokens: 8 more equal the target alone, and (radix
    cache on) a tracked state past the 64-token grid was reused."""
    longer = [ids + out[:30] for ids, out in zip(prompts(), expected, strict=True)]
    outputs = [generate(server, ids, 8) for ids in longer]
    assert [out["output_ids"] for out in outputs] == [greedy(target, ids, 8) for ids in longer]
    if radix:
        assert max(out["meta_info"]["cached_tokens"] for out in outputs) >= TRACK_INTERVAL
