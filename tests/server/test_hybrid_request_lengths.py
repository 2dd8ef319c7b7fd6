"""Per-request verify lengths on a hybrid (Gated DeltaNet) target: request i of step s verifies
cycle[(s + i) % 8] positions (`DFLASH_SGLANG_FORCED_REQUEST_LENGTHS`), all in one ragged verify
forward (step/ragged.py) through SGLang's ReplaySSM ring (DFLASH_SGLANG_REPLAY_SSM=1), whose conv
update runs each request's own length on CPU (cpu/gated_deltanet/ragged_verify.py), and the commit folds each
request's accepted records.

Two servers, one at a time: the tiny Qwen3.5-style pair (block 8), our overlap worker (host-sync
check on) and our plain worker, extra_buffer with a track interval of 64, radix cache on. Greedy
outputs one at a time and concurrently (every batch mixing lengths) equal transformers' greedy
decoding of the target, and a request extending a finished one (prompt + its output) reuses the
tracked state and still equals it; the startup log says per-request lengths are on, through the
ring, and the step log shows the ragged steps that ran.
"""

from __future__ import annotations

import pytest

from dflash_sglang.step.replay_choice import REPLAY_ENV
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import OVERLAP_CHECKED, PLAIN, dflash_args
from .hybrid import (
    BLOCK,
    EXTRA_BUFFER,
    HYBRID_ARGS,
    HYBRID_ENV,
    MAX_NEW,
    assert_alone_and_concurrent_equal,
    assert_extension_equals_the_target,
    generate,
    greedy,
    load_target,
    make_hybrid_pair,
    prompts,
)
from .law_matrix import assert_every_setting_follows_the_law

CYCLE = "8,1,4,2,8,3,1,6"
WORKERS = {
    "overlap": (OVERLAP_CHECKED, "overlap.DFlashOverlapWorker"),
    "plain": (PLAIN, "worker.DFlashWorker"),
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_hybrid_pair(tmp_path_factory.mktemp("hybrid-request-lengths"))


@pytest.fixture(scope="module", params=list(WORKERS))
def case(request, pair):
    worker, served_by = WORKERS[request.param]
    env = {**HYBRID_ENV, **worker, FORCED_LENGTHS_ENV: CYCLE, REPLAY_ENV: "1"}
    with SGLangServer(
        pair.target, [*HYBRID_ARGS, *EXTRA_BUFFER, *dflash_args(pair, BLOCK)], env=env
    ) as server:
        server.served_by = served_by
        expected = [greedy(pair.target, ids, MAX_NEW) for ids in prompts()]
        yield pair, server, expected


def test_the_startup_log_says_per_request_lengths_through_the_ring(case):
    _, server, _ = case
    log = server.log_path.read_text()
    assert f"DFLASH served by dflash_sglang.{server.served_by}" in log
    assert f"verify width forced per-request lengths [{CYCLE.replace(',', ', ')}]" in log
    assert "verify scratch: SGLang's ReplaySSM ring, folded every commit" in log


def test_alone_and_concurrent_equal_the_target_alone(case):
    _, server, expected = case
    assert_alone_and_concurrent_equal(server, expected)


def test_extending_a_finished_request_reuses_its_state_exactly(case):
    pair, server, expected = case
    assert_extension_equals_the_target(server, pair.target, expected)


def test_the_ragged_steps_ran(case):
    _, server, _ = case
    for ids in prompts():  # past REPORT_EVERY steps even when run alone
        generate(server, ids)
    log = server.log_path.read_text()
    assert "per-request lengths in" in log and "(request-steps by length)" in log


@pytest.mark.parametrize("case", ["overlap"], indirect=True)
def test_the_sampled_law_through_ragged_replayed_commits(case):
    """law_matrix.SETTINGS in one mixed batch on the overlap worker: every request's accepted
    records, at its own length, folded into its state; each setting against the target's law and
    its control."""
    pair, server, _ = case
    assert_every_setting_follows_the_law(
        "hybrid, forced per-request lengths, overlap worker", server, load_target(pair.target), prompts()
    )
