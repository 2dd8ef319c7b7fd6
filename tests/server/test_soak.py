"""A reduced soak (`make soak` runs the full one): mixed requests at concurrency 32 on the tiny
pair, about 20% aborted at random points (client disconnects mid-stream, `/abort_request`), with
SGLang's forced retractions (SGLANG_TEST_RETRACT) and its strict idle memory check
(SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE: a leaked token or request slot kills the scheduler).

Afterwards: no request failed, the server is healthy, every KV slot is free once the radix cache is
flushed, and every completed greedy request equals the no-spec server's output for it.
"""

from __future__ import annotations

import pytest

from dflash_sglang_tools.soak.run import kv_tokens_in_use_after_flush, run_workload, summary
from dflash_sglang_tools.soak.workload import make_workload
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import OVERLAP_CHECKED, dflash_args
from .pairs import chat_prompts, load

REQUESTS, CONCURRENCY = 96, 32
SOAK_ENV = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "6",
            "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE": "1"}  # fmt: skip


SOAKS = {  # name: (extra args, extra env)
    "chain": ([], {}),
    # Trees of up to 16 nodes with adaptive budgets: widths change with the load (docs/adaptive.md).
    "adaptive-tree": (["--speculative-eagle-topk", "4"], {"DFLASH_SGLANG_ADAPTIVE_WIDTH": "1"}),
}


@pytest.fixture(scope="module", params=list(SOAKS))
def soaked(request, pair8):
    """The overlap worker, every step under the host-sync check, as a chain and as adaptive trees
    (`make soak` adds the plain worker, the draft window and the hybrid pair, chain and tree)."""
    extra, env = SOAKS[request.param]
    args = [*dflash_args(pair8, 16 if extra else 4), *extra]
    with SGLangServer(pair8.target, args, env={**OVERLAP_CHECKED, **SOAK_ENV, **env}) as server:
        yield server


def test_soak_leaves_nothing_behind(soaked, nospec8, pair8):
    tokenizer = load(pair8.target, pair8.draft)[0]
    prompts = [tokenizer(p)["input_ids"] for p in chat_prompts(12)]
    workload = make_workload(prompts, REQUESTS, seed=1)
    results = run_workload(soaked.base_url, workload, CONCURRENCY)
    counts = summary(results)
    print(f"soak: {counts}, retractions {soaked.log_path.read_text().count('Testing retraction')}")

    assert counts["error"] == 0, [r.detail for r in results if r.outcome == "error"][:3]
    assert counts["aborted"] >= REQUESTS // 10 and counts["completed"] >= REQUESTS // 2
    assert kv_tokens_in_use_after_flush(soaked.base_url) == 0
    log = soaked.log_path.read_text()
    assert "memory leak detected" not in log and "Testing retraction" in log
    assert soaked.generate(prompts[0], 8)["output_ids"] == nospec8.generate(prompts[0], 8)["output_ids"]

    greedy = [r for r in results if r.outcome == "completed" and r.request.greedy]
    assert len(greedy) >= REQUESTS // 3
    for r in greedy:
        body = {k: v for k, v in r.request.body.items() if k != "rid"}
        assert r.output_ids == nospec8.post("/generate", body)["output_ids"], (r.request.kind, r.request.rid)
