"""Our worker under attention DP on CPU (`--tp-size 2 --dp-size 2 --enable-dp-attention
--enable-dp-lm-head`, gloo, one core per rank), in a real SGLang server on 127.0.0.1: each DP rank
runs its own requests through attention and the drafter, the MLP gathers both ranks' tokens.

Requests one at a time leave one DP rank idle every round: it must run the IDLE verify forward,
or its peer's verify collectives never complete (the server would hang). Their outputs and
verify-step counts equal the engine-free reference. Eight concurrent requests keep both ranks busy,
with prefills and verifies of different ranks in the same round. Sampled requests at
law_matrix.SETTINGS (temperatures, filters, a penalty) follow the target's law, controls fail.

One server per worker (overlap, plain), under a minute each.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import PLAIN, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import load, reference, word_prompts

BLOCK = 4
MAX_NEW = 16
DP_ATTENTION = ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--enable-dp-lm-head"]
ONE_CORE_PER_RANK = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
WORKERS = {  # name: (env, the worker class the log names)
    "overlap": ({**ONE_CORE_PER_RANK, "SGLANG_ENABLE_SPEC_V2": "1"}, "overlap.DFlashOverlapWorker"),
    "plain": ({**ONE_CORE_PER_RANK, **PLAIN}, "worker.DFlashWorker"),
}


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module", params=list(WORKERS))
def server(request, pair):
    env = WORKERS[request.param][0]
    with SGLangServer(pair.target, [*DP_ATTENTION, *dflash_args(pair, BLOCK)], env=env) as server:
        server.kind = request.param
        yield server


@pytest.fixture(scope="module")
def prompt_ids(pair):
    return word_prompts(pair)


def test_both_dp_ranks_serve_our_worker(server):
    log = server.log_path.read_text()
    for rank in ("DP0 TP0", "DP1 TP1"):
        assert f"{rank}] dflash_sglang: DFLASH served by dflash_sglang.{WORKERS[server.kind][1]}" in log


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


def test_the_sampled_law_with_real_filters(pair, server, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch (spread over both DP ranks), each against the
    target's law and its control (32 completions a setting: a control's margin says nothing of the
    power against a wrong sampler, docs/reliability.md)."""
    path = {"overlap": "DP attention, overlap worker", "plain": "DP attention, plain worker"}
    _, target, _ = load(pair.target, pair.draft)
    assert_every_setting_follows_the_law(path[server.kind], server, target, prompt_ids)
