"""The streaming client against a stand-in server that replays SGLang 0.5.23's chat stream
(role chunk, text chunks with continuous usage, the sglext chunk, the usage chunk): TTFT,
latency, token counts, the speculation counters, the request body, and errors."""

import asyncio
import json

from aiohttp import web
from aiohttp.test_utils import TestServer

from dflash_sglang_tools.bench.client import Sampling, run_level

DELAY = 0.05
BODIES = web.AppKey("bodies", list)
OPEN = web.AppKey("open", list)  # [requests open now, the most open at once]
SPEC = {"spec_accept_length": 1.25, "spec_verify_ct": 4, "spec_correct_drafts_histogram": [3, 0, 1]}


def chunk(**fields):
    return f"data: {json.dumps({'object': 'chat.completion.chunk', **fields})}\n\n".encode()


def text(content, tokens):
    return chunk(choices=[{"index": 0, "delta": {"content": content}}], usage={"completion_tokens": tokens})


async def sglang_like(request):
    body = await request.json()
    request.app[BODIES].append(body)
    if body["messages"][0]["content"] == "fail":
        return web.json_response({"object": "error", "message": "too long"}, status=400)
    response = web.StreamResponse()
    await response.prepare(request)
    count = request.app[OPEN]
    count[0] += 1
    count[1] = max(count)
    await asyncio.sleep(DELAY)  # prefill
    await response.write(chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}]))
    await response.write(text("a", 1))
    await asyncio.sleep(DELAY)
    await response.write(text("bcd", 4))  # one verify step, several tokens
    await asyncio.sleep(DELAY)
    await response.write(text("e", 5))
    await response.write(chunk(choices=[], sglext={"spec_tokens_details": SPEC}))
    await response.write(chunk(choices=[], usage={"prompt_tokens": 7, "completion_tokens": 5}))
    await response.write(b"data: [DONE]\n\n")
    count[0] -= 1
    return response


async def bench(prompts, concurrency):
    app = web.Application()
    app[BODIES], app[OPEN] = [], [0, 0]
    app.router.add_post("/v1/chat/completions", sglang_like)
    async with TestServer(app, host="127.0.0.1") as server:
        url = str(server.make_url("")).rstrip("/")
        sampling = Sampling(max_tokens=5, temperature=0.0)
        results, duration = await run_level(url, "m", prompts, sampling, concurrency)
    return results, app[OPEN][1], app[BODIES]


def test_stream_timings_tokens_and_speculation_counters():
    results, most_open, bodies = asyncio.run(bench([[{"role": "user", "content": "hi"}]] * 3, 3))
    for result in results:
        assert result.error is None
        assert (result.prompt_tokens, result.completion_tokens) == (7, 5)
        # Lower bounds only (a loaded machine only stretches them): TTFT after the prefill, and
        # taken at the first token, two pauses before the end.
        assert result.ttft_s >= DELAY * 0.9
        assert result.latency_s >= result.ttft_s + 2 * DELAY * 0.9
        assert (result.spec_verify_ct, result.spec_histogram) == (4, [3, 0, 1])
    assert most_open == 3  # all three ran at once
    body = bodies[0]
    assert body["stream"] is True and body["return_spec_tokens_details"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 5, 0.0)


def test_http_errors_are_recorded_not_raised():
    results, _, _ = asyncio.run(bench([[{"role": "user", "content": "fail"}]], 1))
    assert results[0].error.startswith("HTTP 400") and "too long" in results[0].error
    assert results[0].completion_tokens == 0
