"""Tree budgets as verify widths (tree/budgets.py) in real SGLang servers on CPU (float32), on the
hot tiny pair's block-8 drafter with trees of up to 16 nodes (K 4).

- `DFLASH_SGLANG_FORCED_REQUEST_LENGTHS` forces per-request lengths through trees of 16, 5, 2, 9,
  3 and 4 nodes and plain decoding (1): request i of step s verifies the first
  cycle[(s + i) % 8] nodes of its tree, so one batch mixes trees wider and narrower than the
  drafter's block and plain requests in one ragged forward (step/ragged.py), and a request alone
  steps through every width. Overlap worker, host-sync check on: greedy outputs equal the no-spec
  server alone, 8 concurrently and on a radix hit; sampled requests at law_matrix.SETTINGS
  (temperatures, filters, a penalty) follow the target's law, controls fail. (Uniform narrow trees
  run in test_hybrid_tree's forced cycle and in the adaptive server's exploring steps.)
- `DFLASH_SGLANG_ADAPTIVE_WIDTH=1`, plain worker: the policy picks each request's tree budget from
  the walks it has seen (each walk also tells what every smaller budget would have accepted, a
  step later); outputs equal the no-spec server, the log says what ran, and law_matrix.SETTINGS
  follow the law.

Two servers; about 2 minutes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.width.controller import ADAPTIVE_ENV, REPORT_EVERY
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, LENGTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import OVERLAP_CHECKED, PLAIN
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import load, word_prompts
from .test_tree import MAX_NEW, tree_args, tree_reference
from .test_verify_width import reported_widths

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
    env = {**OVERLAP_CHECKED, FORCED_LENGTHS_ENV: CYCLE}
    with SGLangServer(pair8.target, tree_args(pair8, TOPK, NODES), env=env) as server:
        yield server


def test_forced_per_request_tree_lengths_equal_nospec_alone_concurrently_and_on_a_radix_hit(
    pair8, forced, prompt_ids, expected
):
    log = forced.log_path.read_text()
    assert f"a tree of {NODES} nodes, forced per-request lengths [{CYCLE.replace(',', ', ')}]" in log
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


def test_the_sampled_law_with_real_filters_across_per_request_tree_lengths(pair8, forced, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch: every request samples at every tree length."""
    _, target, _ = load(pair8.target, pair8.draft)
    assert_every_setting_follows_the_law("tree, forced per-request lengths", forced, target, prompt_ids)


@pytest.fixture(scope="module")
def adaptive(pair8):
    env = {
        **PLAIN,
        ADAPTIVE_ENV: "1",
        LENGTHS_ENV: "1",
    }  # per-request budgets (trees: one a batch unless asked)
    with SGLangServer(pair8.target, tree_args(pair8, TOPK, NODES), env=env) as server:
        yield server


def test_adaptive_tree_budgets_equal_nospec_and_report_what_ran(adaptive, prompt_ids, expected):
    alone = [adaptive.generate(ids, MAX_NEW) for ids in prompt_ids * 2]  # twice: past REPORT_EVERY steps
    with ThreadPoolExecutor(len(prompt_ids)) as pool:
        together = list(pool.map(lambda ids: adaptive.generate(ids, MAX_NEW), prompt_ids))
    steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
    log = adaptive.log_path.read_text()
    assert [out["output_ids"] for out in alone] == expected * 2
    assert [out["output_ids"] for out in together] == expected
    assert f"a tree of {NODES} nodes, adaptive" in log and "per request" in log
    assert steps >= REPORT_EVERY and f"verify widths of the last {REPORT_EVERY} steps" in log
    ran = set().union(*reported_widths(log))
    assert len(ran) >= 2, f"the policy ran only budgets {ran}: it did not adapt"


def test_the_sampled_law_with_real_filters_under_adaptive_budgets(pair8, adaptive, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch, at whatever budgets the policy picks."""
    _, target, _ = load(pair8.target, pair8.draft)
    assert_every_setting_follows_the_law("tree, adaptive per-request budgets", adaptive, target, prompt_ids)
