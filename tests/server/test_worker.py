"""Our overlap worker (SGLANG_ENABLE_SPEC_V2=1, SGLang's overlap loop, every step checked for host
syncs; the session's shared server), in a real SGLang server on CPU (127.0.0.1), against a
no-spec server of the same target and against the engine-free reference: greedy outputs token
for token, verify-step counts, chat completions (plain and streamed), concurrency, short outputs,
stop strings, radix cache hits, aborts, and bad requests.

The tiny pair's target favours three tokens (`hot_tokens`), so its random drafter is accepted
partially and sometimes fully: the accept paths run, not only the reject path.
"""

from __future__ import annotations

import functools
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.sampling.sampled_drafts import SAMPLED_DRAFTS_ENV
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import PLAIN, dflash_args
from .law_case import COMPLETIONS, FIRST_BLOCKS, trained_case
from .law_matrix import assert_every_setting_follows_the_law
from .law_sampled import SampledDrafter
from .pairs import chat, chat_prompts, load, reference
from .sampling_law import chisquare_pvalue
from .step_records import record_env
from .test_overlap import stream_generate

BLOCK = 4  # the shared pair is written for 8; the flag overrides it, as users do
MAX_NEW = 40
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, no proxy


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module")
def nospec(nospec8):
    return nospec8


@pytest.fixture(scope="module")
def dflash(dflash8_overlap):
    return dflash8_overlap  # block 4, every step checked for host syncs (conftest.py)


@pytest.fixture(scope="module")
def prompt_ids(pair):
    tokenizer = load(pair.target, pair.draft)[0]
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in chat_prompts(16)
    ]
    return [tokenizer(text)["input_ids"] for text in texts]


def test_startup_log_names_our_worker(dflash):
    log = dflash.log_path.read_text()
    served_by = "dflash_sglang: DFLASH served by dflash_sglang.overlap.DFlashOverlapWorker"
    assert f"{served_by} (overlap schedule" in log


def test_greedy_generate_equals_reference_one_at_a_time(pair, dflash, nospec, prompt_ids):
    accepted_more_than_one = 0
    for ids in prompt_ids:
        out = dflash.generate(ids, MAX_NEW)
        ref = reference(pair, ids, MAX_NEW, BLOCK)
        assert out["output_ids"] == ref.tokens
        assert out["output_ids"] == nospec.generate(ids, MAX_NEW)["output_ids"]
        meta = out["meta_info"]
        assert meta["spec_verify_ct"] == len(ref.accept_lengths)  # same drafts, same acceptance
        assert 1.0 <= meta["spec_accept_length"] <= BLOCK
        accepted_more_than_one += max(ref.accept_lengths) > 1
    assert accepted_more_than_one >= 8  # the accept path ran, not only rejections


def test_greedy_generate_eight_at_once(pair, dflash, prompt_ids):
    batch = prompt_ids[:8]
    outs = dflash.generate(batch, MAX_NEW)
    for ids, out in zip(batch, outs, strict=True):
        assert out["output_ids"] == reference(pair, ids, MAX_NEW, BLOCK).tokens


def test_chat_completions_equal_nospec_alone_concurrent_and_streamed(dflash, nospec):
    prompts = chat_prompts(16)
    expected = [chat(nospec, p, max_tokens=MAX_NEW)["choices"][0]["message"]["content"] for p in prompts]
    alone = [chat(dflash, p, max_tokens=MAX_NEW)["choices"][0]["message"]["content"] for p in prompts]
    assert alone == expected
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: chat(dflash, p, max_tokens=MAX_NEW), prompts[:8]))
    assert [r["choices"][0]["message"]["content"] for r in together] == expected[:8]
    for prompt, text in zip(prompts[:4], expected[:4], strict=True):
        assert streamed_chat(dflash, prompt, max_tokens=MAX_NEW) == text


def streamed_chat(server, content: str, **params) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "temperature": 0,
            "stream": True, **params}  # fmt: skip
    request = urllib.request.Request(
        f"{server.base_url}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    text = []
    with DIRECT.open(request, timeout=120) as response:
        for line in response:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                delta = json.loads(line[5:])["choices"][0]["delta"]
                text.append(delta.get("content") or "")
    return "".join(text)


def test_max_tokens_smaller_than_a_block(pair, dflash, prompt_ids):
    for ids in prompt_ids[:4]:
        out = dflash.generate(ids, 3)
        assert out["output_ids"] == reference(pair, ids, 3, BLOCK).tokens
        assert out["meta_info"]["completion_tokens"] == len(out["output_ids"]) <= 3


def test_a_stop_string_mid_output_cuts_where_nospec_cuts(dflash, nospec):
    prompt = chat_prompts(16)[5]
    full = chat(nospec, prompt, max_tokens=MAX_NEW)["choices"][0]["message"]["content"]
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    expected = chat(nospec, prompt, max_tokens=MAX_NEW, stop=[stop])["choices"][0]["message"]["content"]
    got = chat(dflash, prompt, max_tokens=MAX_NEW, stop=[stop])["choices"][0]["message"]["content"]
    assert got == expected and len(got) < len(full)


def test_repeated_prefix_hits_the_radix_cache(pair, dflash, prompt_ids):
    ids = prompt_ids[10]
    first = dflash.generate(ids, MAX_NEW)
    again = dflash.generate(ids, MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0
    assert again["output_ids"] == first["output_ids"] == reference(pair, ids, MAX_NEW, BLOCK).tokens
    # A longer prompt sharing that prefix (prompt + generated text) continues exactly.
    longer = ids + first["output_ids"][:10]
    out = dflash.generate(longer, MAX_NEW)
    assert out["meta_info"]["cached_tokens"] >= len(ids)
    assert out["output_ids"] == reference(pair, longer, MAX_NEW, BLOCK).tokens


def test_abort_mid_generation_while_others_continue(pair, dflash, prompt_ids):
    aborted, started = {}, threading.Event()

    def long_request():
        params = {"temperature": 0, "max_new_tokens": 3000, "ignore_eos": True}
        body = {"input_ids": prompt_ids[0], "rid": "abort-me", "sampling_params": params}
        aborted["result"] = stream_generate(dflash, body, started)

    thread = threading.Thread(target=long_request)
    thread.start()
    assert started.wait(120)  # an abort before SGLang registered the request is silently dropped
    with ThreadPoolExecutor(4) as pool:
        others = pool.map(lambda ids: dflash.generate(ids, MAX_NEW), prompt_ids[1:5])
        abort = urllib.request.Request(
            f"{dflash.base_url}/abort_request",
            json.dumps({"rid": "abort-me"}).encode(),
            {"Content-Type": "application/json"},
        )
        assert DIRECT.open(abort, timeout=30).status == 200
        others = list(others)
    thread.join(60)
    assert aborted["result"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert aborted["result"]["meta_info"]["completion_tokens"] < 3000
    for ids, out in zip(prompt_ids[1:5], others, strict=True):
        assert out["output_ids"] == reference(pair, ids, MAX_NEW, BLOCK).tokens


@pytest.mark.parametrize(
    "path,body,words",
    [
        (
            "/generate",
            {"input_ids": list(range(5000)), "sampling_params": {"max_new_tokens": 4}},
            "context length",
        ),
        ("/generate", {"input_ids": [5, 6, 7], "sampling_params": {"temperature": -1}}, "temperature"),
        ("/generate", {"input_ids": [5, 6, 7], "sampling_params": {"top_p": 2.0}}, "top_p"),
        (
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": -3},
            "temperature",
        ),  # fmt: skip
    ],
)
def test_bad_requests_get_4xx_and_the_server_keeps_serving(pair, dflash, prompt_ids, path, body, words):
    with pytest.raises(urllib.error.HTTPError) as err:
        dflash.post(path, body)
    assert 400 <= err.value.code < 500
    assert words in err.value.read().decode()
    ids = prompt_ids[3]
    assert dflash.generate(ids, MAX_NEW)["output_ids"] == reference(pair, ids, MAX_NEW, BLOCK).tokens


def test_sampling_is_distribution_exact_and_greedy_neighbours_stay_exact(pair, dflash, prompt_ids):
    """Temperature 1: the first three tokens of 400 sampled completions follow the target's own
    joint law (chi-square, p > 1e-4; the same samples fail against temperature 0.7, p < 1e-6). Greedy
    requests running in the same batches stay token-identical to the reference."""
    prompt, n = prompt_ids[2], 400
    params = {"temperature": 1.0, "max_new_tokens": 3, "ignore_eos": True}
    with ThreadPoolExecutor(2) as pool:
        greedy = pool.submit(lambda: [dflash.generate(ids, MAX_NEW) for ids in prompt_ids[6:9]])
        sampled = dflash.post("/generate", {"input_ids": [prompt] * n, "sampling_params": params})
        for ids, out in zip(prompt_ids[6:9], greedy.result(), strict=True):
            assert out["output_ids"] == reference(pair, ids, MAX_NEW, BLOCK).tokens
    assert any(out["meta_info"]["spec_accept_length"] > 1 for out in sampled)  # drafts were accepted

    _, target, _ = load(pair.target, pair.draft)
    completions = [out["output_ids"] for out in sampled]
    p_value = functools.partial(chisquare_pvalue, target, prompt, completions)
    at_1, at_07 = p_value(1.0), p_value(0.7)
    print(f"chi-square p-values: T=1.0 {at_1:.3g}, T=0.7 {at_07:.3g}")
    assert at_1 > 1e-4
    assert at_07 < 1e-6


def test_the_readme_openai_client_call(dflash, nospec):
    """The seed cards' client code (as in the README) against the DFLASH server."""
    import httpx
    from openai import OpenAI

    def ask(server):
        client = OpenAI(
            base_url=f"{server.base_url}/v1", api_key="EMPTY", http_client=httpx.Client(trust_env=False)
        )
        response = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Write a quicksort in Python."}],
            max_tokens=64,
            temperature=0.0,
        )
        return response.choices[0].message.content

    answer = ask(dflash)
    assert answer and answer == ask(nospec)


OVERLAP_CHECKED_DFLASH = {**PLAIN, "SGLANG_ENABLE_DFLASH_SPEC_V2": "1", "DFLASH_SGLANG_CHECK_HOST_SYNC": "1"}


@pytest.mark.parametrize(
    "env,drafts,path",
    [
        (OVERLAP_CHECKED_DFLASH, "1", "chain, sampled drafts, overlap worker"),
        (PLAIN, "0", "chain, point drafts, plain worker"),
    ],
    ids=["sampled-overlap", "point-plain"],
)
def test_the_sampled_law_with_real_filters(env, drafts, path, tmp_path):
    """law_matrix.SETTINGS in one mixed batch, each against the target's law and its control, on
    law_case.py's trained pair and prompt, where the bugs of speculative sampling show
    (docs/reliability.md, tests/planted/). Both kinds of draft, so a bug planted in either verify
    fails this test: drafts sampled from q (the default), whose bugs' laws the judge sums the
    unseen drafts out of (law_sampled.py), and point drafts (SAMPLED_DRAFTS_ENV=0), which it reads
    back (law_drafts.py). One server at a time."""
    pair, target, drafter, prompt = trained_case()
    # The step record gives the judge each completion's acceptance pattern (law_pattern.py).
    env = {**env, SAMPLED_DRAFTS_ENV: drafts, **record_env(tmp_path)}
    judge_with = SampledDrafter(drafter) if drafts == "1" else drafter
    with SGLangServer(pair.target, dflash_args(pair, drafter.block_size), env=env) as server:
        first = FIRST_BLOCKS if drafts == "1" else 0  # the omnibus, for sampled drafts' rules
        assert_every_setting_follows_the_law(
            path, server, target, [prompt], n=COMPLETIONS, drafter=judge_with, first=first
        )  # fmt: skip


def test_make_demo_asks_your_own_question(dflash, nospec, capsys, monkeypatch):
    """`make demo PROMPT=...` (demo.py --prompt): the question asked of both servers, the DFLASH
    server's answer printed, the same text as no-spec's."""
    from dflash_sglang_tools import demo

    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)  # loopback only
    prompt = "Write a function that merges two sorted lists."
    args = ["--url", dflash.base_url, "--baseline-url", nospec.base_url, "--prompt", prompt]
    assert demo.main([*args, "--max-tokens", "32", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out
    assert "the same text" in printed
    answer = chat(dflash, prompt, max_tokens=32)["choices"][0]["message"]["content"]
    cards = chat(dflash, demo.CARDS_PROMPT, max_tokens=32)["choices"][0]["message"]["content"]
    assert answer and answer in printed and answer != cards
