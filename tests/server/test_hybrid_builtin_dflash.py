"""SGLang's built-in DFLASH worker (DFLASH_SGLANG_WORKER=builtin; ours: test_hybrid_worker.py) on
the tiny Qwen3.5-style hybrid pair on `--device cpu`, against transformers' greedy decoding of the
target alone. This runs the GPU-only calls DFLASH makes on hybrid targets through the CPU layer:
the conv over the verify block saving every step's window, the recurrence keeping every step's
state without touching the live one, and the commit that scatters the accepted step's state into
the request's slot and, at a 64-token boundary, into its extra_buffer track slot (reused below by
requests that extend a finished one).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import SGLangServer

from .hybrid import (
    BLOCK,
    EXTRA_BUFFER,
    HYBRID_ARGS,
    HYBRID_ENV,
    MAX_NEW,
    generate,
    greedy,
    make_hybrid_pair,
    prompts,
)

PORTS = range(30400, 30500)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_hybrid_pair(tmp_path_factory.mktemp("hybrid-dflash"))


@pytest.fixture(scope="module")
def expected(pair):
    return [greedy(pair.target, ids, MAX_NEW) for ids in prompts()]


@pytest.fixture(scope="module")
def server(pair, tmp_path_factory):
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
              "--speculative-num-draft-tokens", BLOCK]  # fmt: skip
    env = {**HYBRID_ENV, "DFLASH_SGLANG_WORKER": "builtin"}
    with SGLangServer(
        pair.target, [*HYBRID_ARGS, *EXTRA_BUFFER, *dflash], env=env, port_range=PORTS,
        log_dir=tmp_path_factory.mktemp("hybrid-dflash-log"),
    ) as server:  # fmt: skip
        yield server


def test_one_at_a_time_equals_the_target_alone_with_drafts_accepted(server, expected):
    outputs = [generate(server, ids) for ids in prompts()]
    assert [out["output_ids"] for out in outputs] == expected
    # Partial acceptance: commits land on steps other than the first.
    assert max(out["meta_info"]["spec_accept_length"] for out in outputs) > 1


def test_concurrent_requests_equal_the_target_alone(server, expected):
    with ThreadPoolExecutor(len(expected)) as pool:
        outputs = list(pool.map(lambda ids: generate(server, ids), prompts()))
    assert [out["output_ids"] for out in outputs] == expected


def test_states_tracked_during_verify_are_reused_exactly(server, pair, expected):
    longer = [ids + out[:30] for ids, out in zip(prompts(), expected, strict=True)]
    outputs = [generate(server, ids, 8) for ids in longer]
    assert [out["output_ids"] for out in outputs] == [greedy(pair.target, ids, 8) for ids in longer]
    assert max(out["meta_info"]["cached_tokens"] for out in outputs) >= 64
