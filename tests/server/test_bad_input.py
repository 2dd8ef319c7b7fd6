"""Bad input gets a 4xx, never a crash: a fuzz of malformed requests (wrong types, out-of-range
numbers, n = 0, empty and over-long prompts, invalid regex and JSON schema, out-of-vocabulary ids,
unknown fields, invalid UTF-8, truncated JSON) on /generate, /v1/completions and
/v1/chat/completions, sent to our overlap worker (the session's shared server, host-sync check
on) while good requests stream.

- No 5xx, no crash: SGLang 0.5.23 itself died of some of these (out-of-vocabulary prompt ids, an
  empty text prompt, top_logprobs_num above the vocabulary, logprob_start_len below -1) or
  answered 500 (n null or 10**12); admission/input_checks.py refuses them with a 400.
- Ours answers each with the no-spec server's status (where it refuses, with a message; where it
  answers, with the same tokens).
- Every good request, streamed alongside, completes with the no-spec server's text.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from .pairs import chat_prompts, load

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
VOCAB = 384
OK_PARAMS = {"max_new_tokens": 8, "temperature": 0}


def generate(**fields):
    body = {"input_ids": [5, 6, 7, 8], "sampling_params": dict(OK_PARAMS)}
    for key, value in fields.items():
        if key.startswith("sp_"):
            body["sampling_params"][key[3:]] = value
        else:
            body[key] = value
    return "/generate", body


def chat(**fields):
    return "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                    "max_tokens": 8, "temperature": 0, **fields}  # fmt: skip


def completion(**fields):
    return "/v1/completions", {"model": "m", "prompt": "def f", "max_tokens": 8, "temperature": 0, **fields}


BAD_VALUES = [None, "x", -1, 0, 1.5, 10**12, [], {}, True, float("inf")]

CASES = [
    # every sampling parameter with every wrong value
    *[generate(**{f"sp_{name}": value}) for name in (
        "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty",
        "presence_penalty", "repetition_penalty", "min_new_tokens", "n") for value in BAD_VALUES],
    # prompts
    generate(input_ids=[]), generate(input_ids=[-1, 5]), generate(input_ids=[VOCAB + 10]),
    generate(input_ids=[[5], []]), generate(input_ids="not ids"), generate(input_ids=[5] * 5000),
    ("/generate", {"text": "", "sampling_params": OK_PARAMS}),
    ("/generate", {"text": "a" * 20000, "sampling_params": OK_PARAMS}),
    ("/generate", {"sampling_params": OK_PARAMS}), ("/generate", {}), ("/generate", []),
    # constrained output and biases
    generate(sp_regex="([a-z"), generate(sp_json_schema="{not json"), generate(sp_ebnf="root ::= ("),
    generate(sp_json_schema=json.dumps({"type": "nonsense"})),
    generate(sp_regex="[a-z]+", sp_json_schema=json.dumps({"type": "string"})),
    generate(sp_logit_bias={str(VOCAB + 5): 10}), generate(sp_logit_bias={"-3": 10}),
    generate(sp_logit_bias={"x": 1}), generate(sp_stop_token_ids=[VOCAB * 4]), generate(sp_stop=5),
    # logprob requests
    generate(return_logprob=True, top_logprobs_num=-1), generate(return_logprob=True, top_logprobs_num=10**6),
    generate(return_logprob=True, logprob_start_len=10**6),
    generate(return_logprob=True, logprob_start_len=-5),
    generate(return_logprob=True, token_ids_logprob=[VOCAB + 1]), generate(return_logprob="yes"),
    generate(lora_path="no-such-adapter"), generate(stream="maybe"), generate(rid=5),
    # OpenAI chat
    chat(max_tokens=-1), chat(max_tokens=10**9), chat(n=0), chat(n=-2), chat(temperature=-1),
    chat(top_p=2), chat(messages=[]), chat(messages="hi"),
    chat(messages=[{"role": "nobody", "content": "x"}]),
    chat(messages=[{"content": "no role"}]), chat(logprobs=True, top_logprobs=100), chat(top_logprobs=3),
    chat(response_format={"type": "json_schema"}), chat(response_format={"type": "nope"}),
    chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bad"}}}),
    chat(logit_bias={"999999": 5}), chat(stop=[5]), chat(seed="x"), chat(frequency_penalty=5),
    chat(presence_penalty=-5), chat(tools="x"), chat(tool_choice="required"), chat(stream_options={"x": 1}),
    # OpenAI completions
    completion(prompt=""), completion(prompt=[]), completion(prompt=[[VOCAB + 3]]), completion(max_tokens=-4),
    completion(logprobs=-1), completion(logprobs=100), completion(echo="x"), completion(best_of=0),
    completion(n=0), completion(suffix=5), completion(prompt=["a", 5]), completion(prompt="a" * 20000),
]  # fmt: skip


RAW_CASES = [
    ("/generate", b'{"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 4'),  # truncated
    ("/generate", b'{"text": "\xff\xfe bad utf-8", "sampling_params": {"max_new_tokens": 4}}'),
    ("/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "\xc3\x28"}]}'),
    ("/v1/completions", b"not json at all"),
    ("/v1/chat/completions", b""),
    ("/generate", b"[1, 2, 3]"),
]
UNKNOWN_FIELDS = [
    generate(no_such_field=1), generate(sp_no_such_param=3), chat(no_such_field={"a": 1}),
    completion(no_such_field=[1]), chat(messages=[{"role": "user", "content": "hi", "extra": 1}]),
]  # fmt: skip


def send(server, path, body) -> tuple[int, object]:
    """Status and reply of one request; `body` is JSON-encoded unless it is raw bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{server.base_url}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with DIRECT.open(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def tokens(reply) -> object:
    """What to compare of an answered request: its tokens or texts, not ids or timings."""
    if isinstance(reply, list):
        return [tokens(r) for r in reply]
    if not isinstance(reply, dict):
        return None
    if "output_ids" in reply:
        return reply["output_ids"]
    return [
        choice.get("text") or (choice.get("message") or {}).get("content")
        for choice in reply.get("choices", [])
    ]


def is_greedy(body) -> bool:
    """Answers compare token for token only at temperature 0 (some cases ask for sampling)."""
    if not isinstance(body, dict):
        return False
    params = body.get("sampling_params", body)
    temperature = params.get("temperature") if isinstance(params, dict) else None
    return type(temperature) in (int, float) and temperature == 0


def streamed_text(server, input_ids) -> str:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": 24, "temperature": 0},
        "stream": True,
    }
    request = urllib.request.Request(f"{server.base_url}/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    text = None
    with DIRECT.open(request, timeout=300) as response:
        for line in response:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                text = json.loads(line[5:])["text"]  # cumulative
    return text


def test_malformed_requests_get_4xx_while_good_ones_stream(dflash8_overlap, nospec8, pair8):
    cases = CASES + RAW_CASES + UNKNOWN_FIELDS
    assert len(cases) >= 100
    tokenizer = load(pair8.target, pair8.draft)[0]
    good = [tokenizer(p)["input_ids"] for p in chat_prompts(6)]
    want_text = [nospec8.generate(ids, 24)["text"] for ids in good]
    want = [send(nospec8, path, body) for path, body in cases]

    stop, streamed = threading.Event(), []

    def stream_good_requests():
        while not stop.is_set():
            with ThreadPoolExecutor(len(good)) as pool:
                streamed.append(list(pool.map(lambda ids: streamed_text(dflash8_overlap, ids), good)))

    streamer = threading.Thread(target=stream_good_requests)
    streamer.start()
    try:
        got = [send(dflash8_overlap, path, body) for path, body in cases]
    finally:
        stop.set()
        streamer.join()

    server_errors = [(case, g) for case, g in zip(cases, got, strict=True) if g[0] >= 500]
    assert server_errors == []
    assert [w[0] for w in want if w[0] >= 500] == []
    refused = [g for g in got if 400 <= g[0] < 500]
    assert len(refused) >= 80 and all(len(str(reply)) > 10 for _, reply in refused)  # with a message
    mismatched = [(case, g[0], w[0]) for case, g, w in zip(cases, got, want, strict=True) if g[0] != w[0]]
    assert mismatched == []
    answered = [
        (tokens(g[1]), tokens(w[1]))
        for (_, body), g, w in zip(cases, got, want, strict=True)
        if g[0] == 200 and is_greedy(body)
    ]
    assert len(answered) >= 20
    answered_count = len(got) - len(refused)
    print(f"{len(cases)} malformed requests: {len(refused)} refused with a 4xx, {answered_count} answered, "
          f"{len(server_errors)} 5xx; {len(streamed) * len(good)} good streams alongside")  # fmt: skip
    assert [ours for ours, _ in answered] == [theirs for _, theirs in answered]
    assert streamed and all(texts == want_text for texts in streamed)
    assert [dflash8_overlap.generate(ids, 24)["text"] for ids in good] == want_text  # still serving
