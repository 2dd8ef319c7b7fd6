"""Our worker under attention DP on CPU (`--tp-size 2 --dp-size 2 --enable-dp-attention
--enable-dp-lm-head`, gloo, one core per rank), in a real SGLang server on 127.0.0.1: each DP rank
runs its own requests through attention and the drafter, the MLP gathers both ranks' tokens.

Requests one at a time leave one DP rank idle every round: it must run the IDLE verify forward,
or its peer's verify collectives never complete (the server would hang). Their outputs and
verify-step counts equal the engine-free reference. Eight concurrent requests keep both ranks busy,
with prefills and verifies of different ranks in the same round. At temperature 1 every token
follows the target's law.

One server, about 2 minutes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.testing.server import SGLangServer

from .conftest import dflash_args
from .pairs import load, reference, word_prompts
from .sampling_law import assert_follows_target_law

BLOCK = 4
MAX_NEW = 16
DP_ATTENTION = ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--enable-dp-lm-head"]
ENV = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_ENABLE_SPEC_V2": "1"}


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module")
def server(pair):
    with SGLangServer(pair.target, [*DP_ATTENTION, *dflash_args(pair, BLOCK)], env=ENV) as server:
        yield server


@pytest.fixture(scope="module")
def prompt_ids(pair):
    return word_prompts(pair)


def test_both_dp_ranks_serve_our_worker(server):
    log = server.log_path.read_text()
    for rank in ("DP0 TP0", "DP1 TP1"):
        assert f"{rank}] dflash_sglang: DFLASH served by dflash_sglang.overlap.DFlashOverlapWorker" in log


def test_one_at_a_time_an_idle_rank_keeps_step_and_outputs_equal_the_reference(pair, server, prompt_ids):
    accepted_more_than_one = 0
    for ids in prompt_ids[:4]:
        out = server.generate(ids, MAX_NEW)
        ref = reference(pair, ids, MAX_NEW, BLOCK)
        assert out["output_ids"] == ref.tokens
        assert out["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)
        accepted_more_than_one += max(ref.accept_lengths) > 1
    assert accepted_more_than_one >= 2


def test_eight_concurrent_requests_on_both_ranks(pair, server, prompt_ids):
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in outs] == want


def test_sampling_follows_the_target_law(pair, server, prompt_ids):
    """Temperature 1, 96 completions of 16 tokens in one batch request (spread over both DP ranks):
    every token follows the target's law (sequential PIT), with the T=0.6 negative control."""
    params = {"temperature": 1.0, "max_new_tokens": 16, "ignore_eos": True}
    sampled = server.post("/generate", {"input_ids": [prompt_ids[7]] * 96, "sampling_params": params})
    _, target, _ = load(pair.target, pair.draft)
    assert_follows_target_law(target, prompt_ids[7], [out["output_ids"] for out in sampled])
