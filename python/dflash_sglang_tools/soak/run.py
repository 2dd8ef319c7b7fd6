"""Run a soak workload against a server, and check what it left behind.

    results = run_workload(server_url, make_workload(prompts, 200), concurrency=32)

Each result says how the request ended: "completed" (with its output ids), "aborted" (by us, as
planned) or "error" (a status >= 500, a broken connection or a finish that is neither; a soak
passes with none). `kv_tokens_in_use_after_flush` reads the idle server's token pool through
SGLang's /v1/loads once its radix cache is flushed.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from .workload import SoakRequest

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclasses.dataclass
class SoakResult:
    request: SoakRequest
    outcome: str  # "completed", "aborted", "error"
    output_ids: list | None = None
    detail: str = ""


def _post(url: str, body: dict, timeout: float = 600):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return DIRECT.open(request, timeout=timeout)


def _run_one(url: str, req: SoakRequest) -> SoakResult:
    try:
        if req.abort == "disconnect":
            with _post(f"{url}/generate", {**req.body, "stream": True}) as response:
                for chunks, _ in enumerate(response):
                    if chunks >= req.abort_after:
                        break  # the client goes away mid-stream
            return SoakResult(req, "aborted")
        if req.abort == "abort_request":
            timer = threading.Timer(0.05 * req.abort_after, _abort, (url, req.rid))
            timer.start()
        with _post(f"{url}/generate", req.body) as response:
            reply = json.loads(response.read())
        finish = reply["meta_info"]["finish_reason"]["type"]
        if finish == "abort" and req.abort == "abort_request":
            return SoakResult(req, "aborted")
        if finish in ("length", "stop"):
            return SoakResult(req, "completed", reply["output_ids"])
        return SoakResult(req, "error", detail=f"finish {reply['meta_info']['finish_reason']}")
    except urllib.error.HTTPError as error:
        return SoakResult(req, "error", detail=f"HTTP {error.code}: {error.read()[:200]!r}")
    except (OSError, ValueError) as error:
        return SoakResult(req, "error", detail=repr(error))


def _abort(url: str, rid: str) -> None:
    try:
        _post(f"{url}/abort_request", {"rid": rid}, timeout=30).close()
    except OSError:
        pass  # the request may have finished already


def run_workload(url: str, workload: list[SoakRequest], concurrency: int = 32) -> list[SoakResult]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda req: _run_one(url, req), workload))


def loads(url: str) -> dict:
    """The scheduler's live counts (SGLang's /v1/loads; one data-parallel rank here)."""
    with DIRECT.open(f"{url}/v1/loads", timeout=60) as response:
        return json.loads(response.read())["loads"][0]


def wait_idle(url: str, timeout: float = 120) -> dict:
    """Until the scheduler runs and queues nothing (aborted streams finish in the background)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = loads(url)
        if now["num_running_reqs"] == 0 and now["num_waiting_reqs"] == 0:
            return now
        time.sleep(0.5)
    raise TimeoutError(f"the server is still busy after {timeout:.0f}s: {now}")


def kv_tokens_in_use_after_flush(url: str) -> int:
    """Idle, with the radix cache flushed, every KV slot must be free again: a leak shows here."""
    wait_idle(url)
    _post(f"{url}/flush_cache", {}).close()
    return wait_idle(url)["num_used_tokens"]


def summary(results: list[SoakResult]) -> dict:
    counts = {
        outcome: sum(r.outcome == outcome for r in results) for outcome in ("completed", "aborted", "error")
    }
    return {"requests": len(results), **counts}
