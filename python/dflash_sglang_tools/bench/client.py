"""Streamed chat completions against a running server, N at a time.

Every request goes to `/v1/chat/completions` with `stream: true`, so TTFT is measured where the
first generated text arrives, and asks SGLang for its speculation counters
(`return_spec_tokens_details`: an `sglext` chunk at the end of the stream) and for the token
count of every chunk (`continuous_usage_stats`). Servers that do not know those fields (plain
OpenAI-compatible servers) still give throughput, TTFT and TPOT.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import aiohttp
from tqdm import tqdm

from .results import RequestResult

TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=3600)


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 0.0
    enable_thinking: bool = False
    ignore_eos: bool = False  # every request its max_tokens (a load whose lengths do not vary)
    # A mixed load: request i of a level at temperatures[i % len] instead (bench/mixed_load.py).
    temperatures: tuple[float, ...] = ()

    def body(self, model: str, messages: list[dict], index: int = 0) -> dict:
        temperature = (
            self.temperatures[index % len(self.temperatures)] if self.temperatures else self.temperature
        )
        return {
            "model": model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": temperature,
            # Qwen3 templates think by default; the published 8B drafters were trained without it.
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking},
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "return_spec_tokens_details": True,
            **({"ignore_eos": True} if self.ignore_eos else {}),
        }


def session(concurrency: int) -> aiohttp.ClientSession:
    # trust_env=False: a benchmark of a local server must never go through an HTTP proxy.
    connector = aiohttp.TCPConnector(limit=max(concurrency, 1))
    return aiohttp.ClientSession(connector=connector, timeout=TIMEOUT, trust_env=False)


async def stream_chat(http: aiohttp.ClientSession, url: str, body: dict) -> RequestResult:
    result = RequestResult()
    start = time.perf_counter()
    try:
        async with http.post(f"{url}/v1/chat/completions", json=body) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:300]}"
                return result
            async for chunk in _events(response):
                _read_chunk(chunk, result, time.perf_counter() - start)
    except (TimeoutError, aiohttp.ClientError, ValueError) as error:  # ValueError: a garbled chunk
        result.error = f"{type(error).__name__}: {error}"
    result.latency_s = time.perf_counter() - start
    if result.error is None and result.completion_tokens == 0:
        result.error = "the stream carried no tokens"
    return result


async def _events(response: aiohttp.ClientResponse):
    async for raw in response.content:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield json.loads(data)


def _read_chunk(chunk: dict, result: RequestResult, elapsed: float) -> None:
    if "error" in chunk or chunk.get("object") == "error":
        result.error = str(chunk.get("error") or chunk.get("message"))[:300]
        return
    usage = chunk.get("usage") or {}
    if usage:
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)
    if not result.ttft_s and (usage.get("completion_tokens") or _has_text(chunk)):
        result.ttft_s = elapsed
    details = (chunk.get("sglext") or {}).get("spec_tokens_details")
    if isinstance(details, list):  # n > 1 gives one entry per choice; we send n = 1
        details = details[0] if details else None
    if details:
        result.spec_verify_ct = int(details.get("spec_verify_ct") or 0)
        result.spec_histogram = list(details.get("spec_correct_drafts_histogram") or [])


def _has_text(chunk: dict) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


async def run_level(
    url: str, model: str, prompts: list[list[dict]], sampling: Sampling, concurrency: int, desc: str = ""
) -> tuple[list[RequestResult], float]:
    """All prompts, at most `concurrency` in flight; returns the results (prompt order) and the
    wall time from the first request sent to the last stream closed."""
    gate = asyncio.Semaphore(concurrency)
    async with session(concurrency) as http:
        with tqdm(total=len(prompts), desc=desc or f"concurrency {concurrency}", unit="req") as bar:

            async def one(index: int, messages: list[dict]) -> RequestResult:
                async with gate:
                    result = await stream_chat(http, url, sampling.body(model, messages, index))
                bar.update(1)
                return result

            start = time.perf_counter()
            results = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
            return list(results), time.perf_counter() - start
