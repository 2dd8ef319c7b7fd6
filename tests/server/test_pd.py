"""Our worker under PD disaggregation, in real processes on 127.0.0.1: a prefill server and a
decode server, both `--speculative-algorithm DFLASH` with our overlap worker, SGLang's router
(`sglang_router --pd-disaggregation`) in front, and Mooncake's transfer engine moving the KV over
TCP (no GPU or RDMA device). The prefill server injects the prompt's target features into its
draft KV pool, which SGLang sends with the target KV, addressed by target slot ids; the decode
server's first step drafts from that draft KV and the prefill's first token.

Greedy outputs through the router equal the engine-free reference token for token, and so do the
plain worker's verify-step counts: the decode server's drafter drafts exactly what it would have
drafted had it run the prefill itself, so the draft KV arrived whole. The overlap worker's decode
server verifies per-request lengths (a forced cycle: one batch mixes plain steps, narrow and whole
blocks), so its step counts differ from the reference's while its tokens may not. Also 8
concurrent requests, a radix-cache hit on the prefill server, a chat completion, and sampled
requests at law_matrix.SETTINGS (temperatures, filters, a penalty) following the target's law,
controls failing. A hybrid (Gated DeltaNet) target moves its recurrent state with the KV: its
outputs equal transformers' greedy decoding.

Servers: a hybrid deployment first, then prefill + decode + router per worker (overlap, plain),
one server refused at startup.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV
from dflash_sglang_tools.testing.pd import PDDeployment, pd_role_args
from dflash_sglang_tools.testing.server import ServerError, SGLangServer

from . import hybrid
from .conftest import PLAIN, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import load, reference, word_prompts

BLOCK = 4
MAX_NEW = 24
OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1"}
PER_REQUEST = {FORCED_LENGTHS_ENV: "4,1,3,2"}  # each request's length, cycling step by step
WORKERS = {  # name: (env, the worker class the log names)
    "overlap": ({**OVERLAP, **PER_REQUEST}, "overlap.DFlashOverlapWorker"),
    "plain": (PLAIN, "worker.DFlashWorker"),
}


def test_hybrid_target_moves_its_state_and_equals_transformers(tmp_path):
    """The tiny Qwen3.5-style pair, overlap worker, extra_buffer, block 8: six prompts of 1-130
    tokens one at a time and at once. Its own deployment, gone before the module's starts."""
    pair = hybrid.make_hybrid_pair(tmp_path)
    args = [*hybrid.HYBRID_ARGS, *hybrid.EXTRA_BUFFER, *dflash_args(pair, hybrid.BLOCK)]
    prompts = hybrid.prompts()
    want = [hybrid.greedy(pair.target, ids, MAX_NEW) for ids in prompts]
    with PDDeployment(pair.target, args, env={**hybrid.HYBRID_ENV, **OVERLAP}) as deployment:
        one_at_a_time = [hybrid.generate(deployment.router, ids, MAX_NEW) for ids in prompts]
        with ThreadPoolExecutor(len(prompts)) as pool:
            at_once = list(pool.map(lambda ids: hybrid.generate(deployment.router, ids, MAX_NEW), prompts))
    assert [out["output_ids"] for out in one_at_a_time] == want
    assert [out["output_ids"] for out in at_once] == want
    assert any(out["meta_info"]["spec_accept_length"] > 1 for out in one_at_a_time)


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module", params=list(WORKERS))
def pd(request, pair):
    with PDDeployment(pair.target, dflash_args(pair, BLOCK), env=WORKERS[request.param][0]) as deployment:
        deployment.kind = request.param
        yield deployment


@pytest.fixture(scope="module")
def prompt_ids(pair):
    return word_prompts(pair)


def test_both_sides_serve_our_worker(pd):
    for server in (pd.prefill, pd.decode):
        log = server.log_path.read_text()
        assert f"DFLASH served by dflash_sglang.{WORKERS[pd.kind][1]}" in log
        # The transfer moves draft KV by slot: nothing of it may wait (step/deferred_context.py).
        assert "plain steps' context injected at once (PD disaggregation moves the KV)" in log
    if pd.kind == "overlap":
        assert "forced per-request lengths [4, 1, 3, 2]" in pd.decode.log_path.read_text()


def test_greedy_through_the_router_equals_the_reference_drafts_included(pair, pd, prompt_ids):
    accepted_more_than_one = 0
    for ids in prompt_ids[:5]:
        out = pd.router.generate(ids, MAX_NEW)
        ref = reference(pair, ids, MAX_NEW, BLOCK)
        assert out["output_ids"] == ref.tokens
        if pd.kind == "plain":  # the same drafts step by step: the prefill's draft KV, whole
            assert out["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)
        accepted_more_than_one += max(ref.accept_lengths) > 1
    assert accepted_more_than_one >= 3


def test_eight_concurrent_requests_and_a_prefill_radix_hit(pair, pd, prompt_ids):
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda ids: pd.router.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in outs] == want
    # Served before: the prefill server takes the prefix (target and draft KV) from its radix cache.
    longer = prompt_ids[-1] + prompt_ids[2]
    out = pd.router.generate(longer, MAX_NEW)
    assert out["output_ids"] == reference(pair, longer, MAX_NEW, BLOCK).tokens
    assert out["meta_info"]["cached_tokens"] >= len(prompt_ids[-1]) - 1


def test_chat_completion_through_the_router(pair, pd):
    tokenizer = load(pair.target, pair.draft)[0]
    messages = [{"role": "user", "content": "the quick brown fox jumps over"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(getattr(ids, "input_ids", ids))
    want = reference(pair, ids, MAX_NEW, BLOCK).tokens
    reply = pd.router.post(
        "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": MAX_NEW, "temperature": 0}
    )
    text = reply["choices"][0]["message"]["content"]
    assert text.strip() == tokenizer.decode(want, skip_special_tokens=True).strip()
    assert reply["usage"]["completion_tokens"] == len(want)


def test_the_sampled_law_with_real_filters(pair, pd, prompt_ids):
    """The first token is sampled on the prefill server, the rest by the decode server's sampled
    verify: law_matrix.SETTINGS through the router, each against the target's law and its control
    (32 completions a setting, each a request of its own through the router and the KV transfer:
    a control's margin says nothing of the power against a wrong sampler, docs/reliability.md)."""
    path = {"overlap": "PD, overlap worker, per-request lengths", "plain": "PD, plain worker"}
    _, target, _ = load(pair.target, pair.draft)
    law_path = path[pd.kind]
    assert_every_setting_follows_the_law(law_path, pd.router, target, prompt_ids, batched=False)


def test_the_draft_window_is_refused_under_pd_naming_both_options(pair):
    args = [*dflash_args(pair, BLOCK), "--speculative-draft-window-size", "8", *pd_role_args("decode", 0)]
    with pytest.raises(ServerError) as err:
        SGLangServer(pair.target, args, timeout=240).start()
    log = err.value.args[0]
    assert "--speculative-draft-window-size" in log and "--disaggregation-mode decode" in log
