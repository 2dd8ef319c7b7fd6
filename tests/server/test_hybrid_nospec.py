"""A tiny Qwen3.5-style hybrid target (Gated DeltaNet + gated full attention) served by SGLang on
`--device cpu` without speculation, through the CPU layer's GDN stand-ins, against transformers'
greedy decoding token for token: one request at a time, concurrently, and on radix-cache hits,
under both mamba radix-cache strategies:
- no_buffer (needs the synchronous scheduler): the request's own state slot only;
- extra_buffer (overlap scheduler on): state snapshots every 64 tokens in track slots, reused by
  later requests sharing the prefix (prefill snapshots at chunk starts, decode snapshots copied).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import SGLangServer

from .hybrid import (
    EXTRA_BUFFER,
    HYBRID_ARGS,
    HYBRID_ENV,
    MAX_NEW,
    NO_BUFFER,
    generate,
    greedy,
    make_hybrid_pair,
    prompts,
)

PORTS = range(30300, 30400)
STRATEGIES = {"no_buffer": NO_BUFFER, "extra_buffer": EXTRA_BUFFER}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_hybrid_pair(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def expected(pair):
    return [greedy(pair.target, ids, MAX_NEW) for ids in prompts()]


@pytest.fixture(scope="module", params=list(STRATEGIES))
def server(request, pair, tmp_path_factory):
    with SGLangServer(
        pair.target, [*HYBRID_ARGS, *STRATEGIES[request.param]], env=HYBRID_ENV, port_range=PORTS,
        log_dir=tmp_path_factory.mktemp(f"hybrid-{request.param}-log"),
    ) as server:  # fmt: skip
        yield server


def test_one_at_a_time_equals_transformers(server, expected):
    assert [generate(server, ids)["output_ids"] for ids in prompts()] == expected


def test_concurrent_requests_equal_transformers(server, expected):
    with ThreadPoolExecutor(len(expected)) as pool:
        outputs = list(pool.map(lambda ids: generate(server, ids), prompts()))
    assert [out["output_ids"] for out in outputs] == expected


def test_prefix_cache_hits_equal_transformers(server, pair, expected):
    """Each prompt continued by its own output: the prefix (and, with extra_buffer, the linear-
    attention state tracked at a 64-token boundary) comes from the cache."""
    longer = [ids + out[:30] for ids, out in zip(prompts(), expected, strict=True)]
    outputs = [generate(server, ids, 8) for ids in longer]
    assert [out["output_ids"] for out in outputs] == [greedy(pair.target, ids, 8) for ids in longer]
    if "extra_buffer" in server.args:
        assert max(out["meta_info"]["cached_tokens"] for out in outputs) >= 64
