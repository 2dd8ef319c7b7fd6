"""Tree verification (`--speculative-eagle-topk K > 1`) on the tiny Qwen3.5-style hybrid target
(Gated DeltaNet + full attention) on `--device cpu`, float32: the recurrent layers follow the
tree's parent links (each node's conv window and SSM state start from its parent's) and the commit
keeps the accepted path's state (step/hybrid.py).

- overlap worker, `extra_buffer` (track interval 64), radix cache on, K 4, N 16, host-sync check;
- plain worker, `no_buffer`, radix cache on, K 8, N 32;
- overlap worker, `extra_buffer_lazy`, radix cache on, K 4, N 16, tree widths forced through
  16, 1, 5, 2, 9 and 3 nodes (plain steps between trees).

Each: greedy token-identical to transformers decoding the target alone, one at a time and 8 at
once; the engine-free oracle (drafter/reference.py, decoding each node of the tree through the
transformers target) verifies in as many steps on two prompts (the fixed-width cases), and in
some of its steps accepts
a path that leaves the first-child chain, so the committed state there is a non-first branch's;
requests extending a finished one reuse its cached state exactly. On the first two: the sampled
law with real filters (law_matrix.SETTINGS, each with its negative control), and logprobs,
constrained output and penalties equal a no-spec hybrid server's.

Servers: three tree servers and one no-spec; about 5 minutes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang.width.controller import WIDTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

from .hybrid import (
    HYBRID_ARGS,
    HYBRID_ENV,
    MAX_NEW,
    TRACK_INTERVAL,
    assert_request_features_equal_nospec,
    generate,
    greedy,
    load_target,
    prompts,
)
from .law_matrix import assert_every_setting_follows_the_law
from .test_hybrid_worker import (
    EXTRA_BUFFER,
    EXTRA_BUFFER_LAZY,
    NO_BUFFER,
    OVERLAP,
    PLAIN,
    RING,
)

CASES = {  # name: (env, mamba flags, K, N)
    "overlap-extra_buffer-K4-N16": (OVERLAP, EXTRA_BUFFER, 4, 16),
    "plain-no_buffer-K8-N32": (PLAIN, NO_BUFFER, 8, 32),
    # Through the ReplaySSM ring (tree/replay_ring.py: a record per node, no state per node), tree
    # widths forced through 16, 1, 5, 2, 9, 3 nodes: plain steps and smaller trees between.
    "ring-overlap-extra_buffer_lazy-K4-N16-widths": (
        {**OVERLAP, **RING, WIDTHS_ENV: "16,1,5,2,9,3"},
        EXTRA_BUFFER_LAZY,
        4,
        16,
    ),
    "ring-plain-extra_buffer-K4-N16": ({**PLAIN, **RING}, EXTRA_BUFFER, 4, 16),
}
LAW_PATHS = {
    "overlap-extra_buffer-K4-N16": "hybrid tree 16 nodes, extra_buffer, overlap worker",
    "plain-no_buffer-K8-N32": "hybrid tree 32 nodes, no_buffer, plain worker",
    "ring-plain-extra_buffer-K4-N16": "hybrid tree 16 nodes through the ring, extra_buffer, plain worker",
}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_tiny_hybrid_pair(
        tmp_path_factory.mktemp("hybrid-tree"), seed=0, block_size=8, shape=HybridShape(hot_tokens=3)
    )


@pytest.fixture(scope="module")
def expected(pair):
    return [greedy(pair.target, ids, MAX_NEW) for ids in prompts()]


@pytest.fixture(scope="module", params=list(CASES))
def case(request, pair):
    env, flags, topk, width = CASES[request.param]
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
              "--speculative-eagle-topk", topk, "--speculative-num-draft-tokens", width]  # fmt: skip
    with SGLangServer(pair.target, [*HYBRID_ARGS, *flags, *dflash], env={**HYBRID_ENV, **env}) as server:
        yield request.param, server


@pytest.fixture(scope="module")
def nospec(pair):
    with SGLangServer(pair.target, [*HYBRID_ARGS, *NO_BUFFER], env=HYBRID_ENV) as server:
        yield server


def test_the_log_says_the_recurrent_layers_follow_the_tree(case):
    name, server = case
    log = server.log_path.read_text()
    assert "DFLASH tree verification: the" in log and "the recurrent layers follow its parent links" in log
    # the startup line says what a request slot holds, and why
    if name.startswith("ring"):
        assert "verify scratch: SGLang's ReplaySSM ring, a record per tree node (our tree replay)" in log
        assert "GDN ReplaySSM ring buffers allocated" in log
    else:
        assert "verify scratch: a state per tree node (the default for a tree on cpu" in log
        assert "GDN ReplaySSM ring buffers allocated" not in log


def test_greedy_equals_the_target_alone_and_the_oracles_steps(case, pair, expected):
    name, server = case
    alone = [generate(server, ids) for ids in prompts()]
    assert [out["output_ids"] for out in alone] == expected
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1
    with ThreadPoolExecutor(len(expected)) as pool:
        together = list(pool.map(lambda ids: generate(server, ids), prompts()))
    assert [out["output_ids"] for out in together] == expected
    _, _, topk, width = CASES[name]
    target, draft = load_target(pair.target), DFlashDraftModel.from_pretrained(pair.draft)
    branches = 0
    if "widths" in name:  # the forced cycle is not the oracle's fixed tree
        return
    for ids, out in list(zip(prompts(), alone, strict=True))[2:4]:
        ref = dflash_generate(target, draft, torch.tensor([ids]), MAX_NEW, tree_budget=width - 1,
                              tree_topk=topk)  # fmt: skip
        assert ref.tokens == out["output_ids"]
        assert out["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)
        branches += ref.branch_steps
    assert branches > 0  # committed states of non-first branches, and the outputs still equal


def test_extending_a_finished_request_reuses_its_state_exactly(case, pair, expected):
    _, server = case
    longer = [ids + out[:30] for ids, out in zip(prompts(), expected, strict=True)]
    outputs = [generate(server, ids, 8) for ids in longer]
    assert [out["output_ids"] for out in outputs] == [greedy(pair.target, ids, 8) for ids in longer]
    assert max(out["meta_info"]["cached_tokens"] for out in outputs) >= TRACK_INTERVAL


@pytest.mark.parametrize("case", list(LAW_PATHS), indirect=True)
def test_the_sampled_law_with_real_filters(case, pair):
    name, server = case
    assert_every_setting_follows_the_law(LAW_PATHS[name], server, load_target(pair.target), prompts())


@pytest.mark.parametrize("case", list(LAW_PATHS), indirect=True)
def test_request_features_equal_nospec(case, nospec):
    """Logprobs, constrained output (each node masked by the grammar state on its root path) and
    penalties (each node penalised by its root path's drafts), one at a time and together."""
    assert_request_features_equal_nospec(case[1], nospec)
