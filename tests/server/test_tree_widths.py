"""Tree budgets as verify widths (tree/widths.py) in real SGLang servers on CPU (float32), on the
hot tiny pair's block-8 drafter with trees of up to 16 nodes (K 4).

- `DFLASH_SGLANG_VERIFY_WIDTHS` forces every step through trees of 16, 5, 2, 9, 3 and 4 nodes and
  plain decoding (width 1), so consecutive steps switch between trees wider and narrower than the
  drafter's block and no tree at all. Overlap worker, host-sync check on: greedy outputs equal the
  no-spec server alone, 8 concurrently and on a radix hit; at temperature 1 every token follows
  the target's law (sequential PIT, T=0.6 negative control).
- `DFLASH_SGLANG_ADAPTIVE_WIDTH=1`, plain worker: the policy picks tree budgets from the walks it
  has seen (each walk also tells what every smaller budget would have accepted, a step later);
  outputs equal the no-spec server, and the log says what ran.

Two servers; about 2 minutes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.testing.server import SGLangServer
from dflash_sglang.width.verify_width import ADAPTIVE_ENV, REPORT_EVERY, WIDTHS_ENV

from .conftest import OVERLAP_CHECKED, PLAIN
from .pairs import load, word_prompts
from .sampling_law import assert_follows_target_law
from .test_tree import MAX_NEW, tree_args, tree_reference

TOPK, NODES = 4, 16
CYCLE = "16,1,5,2,9,3,16,4"


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    return word_prompts(pair8)


@pytest.fixture(scope="module")
def expected(nospec8, prompt_ids):
    return [out["output_ids"] for out in nospec8.generate(prompt_ids, MAX_NEW)]


@pytest.fixture(scope="module")
def forced(pair8):
    env = {**OVERLAP_CHECKED, WIDTHS_ENV: CYCLE}
    with SGLangServer(pair8.target, tree_args(pair8, TOPK, NODES), env=env) as server:
        yield server


def test_forced_tree_widths_equal_nospec_alone_concurrently_and_on_a_radix_hit(
    pair8, forced, prompt_ids, expected
):
    log = forced.log_path.read_text()
    assert f"a tree of {NODES} nodes, forced cycle [{CYCLE.replace(',', ', ')}]" in log
    alone = [forced.generate(ids, MAX_NEW) for ids in prompt_ids]
    assert [out["output_ids"] for out in alone] == expected
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # paths were accepted
    # Narrow trees and plain steps ran: more verify steps than 16-node trees every step need.
    steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone[:4])
    assert steps > sum(
        len(tree_reference(pair8, ids, NODES - 1, TOPK).accept_lengths) for ids in prompt_ids[:4]
    )
    with ThreadPoolExecutor(len(prompt_ids)) as pool:
        together = list(pool.map(lambda ids: forced.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in together] == expected
    again = forced.generate(prompt_ids[-1], MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == expected[-1]


def test_sampling_follows_the_target_law_across_tree_widths(pair8, forced, prompt_ids):
    """96 completions of 16 tokens at temperature 1 in one batch: every width of the cycle samples."""
    params = {"temperature": 1.0, "max_new_tokens": 16, "ignore_eos": True}
    sampled = forced.post("/generate", {"input_ids": [prompt_ids[7]] * 96, "sampling_params": params})
    assert any(out["meta_info"]["spec_accept_length"] > 1 for out in sampled)
    _, target, _ = load(pair8.target, pair8.draft)
    assert_follows_target_law(target, prompt_ids[7], [out["output_ids"] for out in sampled])


def test_adaptive_tree_budgets_equal_nospec_and_report_what_ran(pair8, prompt_ids, expected):
    env = {**PLAIN, ADAPTIVE_ENV: "1"}
    with SGLangServer(pair8.target, tree_args(pair8, TOPK, NODES), env=env) as server:
        alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids * 2]  # twice: past REPORT_EVERY steps
        with ThreadPoolExecutor(len(prompt_ids)) as pool:
            together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
        steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
        log = server.log_path.read_text()
    assert [out["output_ids"] for out in alone] == expected * 2
    assert [out["output_ids"] for out in together] == expected
    assert f"a tree of {NODES} nodes, adaptive" in log
    assert steps >= REPORT_EVERY and f"verify widths of the last {REPORT_EVERY} steps" in log
