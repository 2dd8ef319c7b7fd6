"""Lossless across verify widths (width/verify_width.py): `DFLASH_SGLANG_VERIFY_WIDTHS` forces every
decode step's width through a changing cycle, whole block, plain decoding (width 1) and partial
blocks in turn, so consecutive steps switch width, per step, across the batch.

- dense target (block 8), overlap and sync workers: prompts one at a time, 8 concurrent and a
  radix hit equal the engine-free reference (the target's greedy output); under the overlap worker
  (host-sync check on) every token sampled at temperature 1 follows the target's law;
- the adaptive width (`DFLASH_SGLANG_ADAPTIVE_WIDTH=1`, overlap worker): outputs equal the
  reference while the policy picks widths from what it measures, and the log shows what ran;
- hybrid (Gated DeltaNet) target (block 8), overlap worker with extra_buffer and sync worker with
  no_buffer: the recurrent state committed at every width; prompts of 1-130 tokens one at a time
  and concurrently equal transformers' greedy decoding.

Five servers, one at a time; about 5 minutes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.testing.server import SGLangServer
from dflash_sglang.width.verify_width import ADAPTIVE_ENV, REPORT_EVERY, WIDTHS_ENV

from . import hybrid
from .conftest import OVERLAP_CHECKED, PLAIN, dflash_args
from .pairs import load, reference, word_prompts
from .sampling_law import assert_follows_target_law

BLOCK = 8
MAX_NEW = 32
CYCLE = "8,1,4,2,8,3,1,6"
WORKERS = {"overlap": OVERLAP_CHECKED, "sync": PLAIN}


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module")
def prompt_ids(pair):
    return word_prompts(pair)


@pytest.fixture(scope="module", params=sorted(WORKERS))
def server(request, pair):
    env = {**WORKERS[request.param], WIDTHS_ENV: CYCLE}
    with SGLangServer(pair.target, dflash_args(pair, BLOCK), env=env) as server:
        server.kind = request.param
        yield server


def test_the_startup_log_names_the_forced_cycle(server):
    assert f"verify width forced cycle [{CYCLE.replace(',', ', ')}]" in server.log_path.read_text()


def test_greedy_equals_the_reference_alone_concurrently_and_on_a_radix_hit(pair, server, prompt_ids):
    refs = [reference(pair, ids, MAX_NEW, BLOCK) for ids in prompt_ids]
    want = [ref.tokens for ref in refs]
    alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids[:4]]
    assert [out["output_ids"] for out in alone] == want[:4]
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # wide steps accepted drafts
    # Narrow steps took place: more verify steps than the whole-block chain needs.
    steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
    assert steps > sum(len(ref.accept_lengths) for ref in refs[:4])
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in together] == want
    again = server.generate(prompt_ids[-1], MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == want[-1]


@pytest.mark.parametrize("server", ["overlap"], indirect=True)
def test_sampling_follows_the_target_law_across_widths(pair, server, prompt_ids):
    """96 completions of 16 tokens at temperature 1 in one batch, so every width of the cycle
    samples: the sequential PIT of every token under the target's law is uniform (KS p > 1e-4),
    and the same samples fail against T=0.6."""
    params = {"temperature": 1.0, "max_new_tokens": 16, "ignore_eos": True}
    sampled = server.post("/generate", {"input_ids": [prompt_ids[7]] * 96, "sampling_params": params})
    _, target, _ = load(pair.target, pair.draft)
    assert_follows_target_law(target, prompt_ids[7], [out["output_ids"] for out in sampled])


def test_the_adaptive_width_is_exact_and_reports_what_ran(pair, prompt_ids):
    env = {**OVERLAP_CHECKED, ADAPTIVE_ENV: "1"}
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    with SGLangServer(pair.target, dflash_args(pair, BLOCK), env=env) as server:
        alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids]
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
        steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
        log = server.log_path.read_text()
    assert [out["output_ids"] for out in alone] == want
    assert [out["output_ids"] for out in together] == want
    assert "verify width adaptive" in log
    assert steps < REPORT_EVERY or f"verify widths of the last {REPORT_EVERY} steps" in log


HYBRID_CASES = {
    "overlap-extra_buffer": (OVERLAP_CHECKED, hybrid.EXTRA_BUFFER),
    "sync-no_buffer": (PLAIN, hybrid.NO_BUFFER),
}


@pytest.mark.parametrize("case", sorted(HYBRID_CASES))
def test_hybrid_target_commits_its_state_at_every_width(tmp_path, case):
    env, strategy = HYBRID_CASES[case]
    pair = hybrid.make_hybrid_pair(tmp_path)
    args = [*hybrid.HYBRID_ARGS, *strategy, *dflash_args(pair, hybrid.BLOCK)]
    prompts = hybrid.prompts()
    want = [hybrid.greedy(pair.target, ids, MAX_NEW) for ids in prompts]
    with SGLangServer(pair.target, args, env={**hybrid.HYBRID_ENV, **env, WIDTHS_ENV: CYCLE}) as server:
        alone = [hybrid.generate(server, ids, MAX_NEW) for ids in prompts]
        with ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(lambda ids: hybrid.generate(server, ids, MAX_NEW), prompts))
    assert [out["output_ids"] for out in alone] == want
    assert [out["output_ids"] for out in together] == want
