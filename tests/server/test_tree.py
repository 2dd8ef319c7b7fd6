"""Tree verification (`--speculative-eagle-topk K > 1`, tree/verify.py) in real SGLang servers on
CPU (float32), on the hot tiny pair's block-8 drafter.

Greedy: token-identical to the no-spec server, one at a time (with the engine-free oracle's
verify-step counts: the same trees), 8 concurrently and on radix-cache hits, under the overlap
worker (host-sync check on: the tree is built, walked and compacted on the device) at a budget of
2B (K 4, N 16) and under the plain worker at 4B with 16-token pages (K 8, N 32). Under both
workers, temperatures with top_p, top_k, min_p and a frequency penalty follow the target's law
(law_matrix.py, each with its negative control). Penalties (frequency, presence, repetition,
min_new_tokens) equal the no-spec server's, 8 requests at once; constrained output (regex, JSON
schema) equals it, 4 requests at once; a verify width below the drafter's block, and the draft
window, fail at startup naming the switch. At --tp-size 2 (overlap worker, N 8 = B, no host-sync
check) the law matrix passes too, and greedy outputs equal the no-spec server
and the oracle's counts.

Servers: one per worker and one at TP=2 (the session's no-spec server is the reference), two
refused; about 6 minutes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import OVERLAP_CHECKED, PLAIN
from .law_case import COMPLETIONS, trained_case
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import chat_prompts, load, word_prompts
from .step_records import record_env
from .test_request_features import SCHEMA
from .test_worker_startup import assert_startup_fails_naming

MAX_NEW = 32
TREES = {  # name: (env, topk K, verify width N, extra flags)
    "overlap-2B": (OVERLAP_CHECKED, 4, 16, []),
    "plain-4B-pages": (PLAIN, 8, 32, ["--page-size", "16"]),
}


def tree_args(pair, topk: int, width: int) -> list:
    return ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-eagle-topk", topk, "--speculative-num-draft-tokens", width]  # fmt: skip


def tree_reference(pair, input_ids, budget: int, topk: int):
    tokenizer, target, draft = load(pair.target, pair.draft)
    return dflash_generate(
        target, draft, torch.tensor([input_ids]), MAX_NEW, stop_token_ids=[tokenizer.eos_token_id],
        tree_budget=budget, tree_topk=topk,
    )  # fmt: skip


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    return word_prompts(pair8)


@pytest.fixture(scope="module")
def expected(nospec8, prompt_ids):
    return [out["output_ids"] for out in nospec8.generate(prompt_ids, MAX_NEW)]


@pytest.fixture(scope="module", params=sorted(TREES))
def tree_server(request, pair8):
    env, topk, width, extra = TREES[request.param]
    with SGLangServer(pair8.target, [*tree_args(pair8, topk, width), *extra], env=env) as server:
        server.kind = request.param
        yield server


def test_the_log_says_a_tree_runs(tree_server):
    log = tree_server.log_path.read_text()
    assert "DFLASH tree verification" in log
    assert "block size 8" in log  # the drafter's block, from its config: N is the verify width


def test_greedy_equals_nospec_alone_concurrently_and_on_radix_hits(pair8, tree_server, prompt_ids, expected):
    alone = [tree_server.generate(ids, MAX_NEW) for ids in prompt_ids]
    assert [out["output_ids"] for out in alone] == expected
    # The same trees as the engine-free oracle: its verify-step counts, request by request.
    _, topk, width, _ = TREES[tree_server.kind]
    for ids, out in zip(prompt_ids[:4], alone, strict=False):
        ref = tree_reference(pair8, ids, width - 1, topk)
        assert ref.tokens == out["output_ids"]
        assert out["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # paths were accepted
    with ThreadPoolExecutor(len(prompt_ids)) as pool:  # every prompt is cached by now
        together = list(pool.map(lambda ids: tree_server.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in together] == expected
    assert together[-1]["meta_info"]["cached_tokens"] > 0  # the longest prompt: at least a page


def test_the_sampled_law_with_real_filters(pair8, tree_server, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch: one target draw per node, the walk descends while
    the draw is a child's token, under temperatures, filters and a penalty."""
    path = {"overlap-2B": "tree 16 nodes, overlap worker", "plain-4B-pages": "tree 32 nodes, plain worker"}
    _, target, _ = load(pair8.target, pair8.draft)
    assert_every_setting_follows_the_law(path[tree_server.kind], tree_server, target, prompt_ids)


def side_by_side(nospec, server, prompts, params) -> list[tuple[dict, dict]]:
    """(no-spec's answer, the tree server's) per prompt, all prompts sent at once to both."""

    def both(ids):
        body = {"input_ids": ids, "sampling_params": params}
        return nospec.post("/generate", body), server.post("/generate", body)

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(both, prompts))


CONSTRAINED = {
    "regex": {"regex": "(ab|cd)+x[0-9]{2}", "max_new_tokens": 24},
    "json_schema": {"json_schema": json.dumps(SCHEMA), "max_new_tokens": 48},
}


@pytest.mark.parametrize("name", sorted(CONSTRAINED))
def test_constrained_output_equals_nospec(tree_server, nospec8, pair8, name):
    """Each node's row is masked by the grammar's state after its root path (SGLang's EAGLE tree
    traversal over the tree's first-child and next-sibling links); 4 prompts at once."""
    prompts = [load(pair8.target, pair8.draft)[0](text)["input_ids"] for text in chat_prompts(10)[6:]]
    pairs = side_by_side(nospec8, tree_server, prompts, {"temperature": 0, **CONSTRAINED[name]})
    assert [got["output_ids"] for _, got in pairs] == [want["output_ids"] for want, _ in pairs]
    assert [got["text"] for _, got in pairs] == [want["text"] for want, _ in pairs]


# Repetition is not combined with the additive penalties: SGLang's synchronous no-spec loop (the
# reference server) applies its penalizers in the iteration order of a set of classes
# (`PenalizerOrchestrator.apply`), so their order there is not defined; its overlap loop and its
# speculative paths, like ours, add first and scale after.
PENALTIES = {
    "frequency_presence": {"frequency_penalty": 0.5, "presence_penalty": 0.4},
    "repetition": {"repetition_penalty": 1.3},
    "min_new_tokens": {"min_new_tokens": 12, "stop_token_ids": [10]},  # 10: a hot token of the pair
}


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_penalties_equal_nospec_concurrently(tree_server, nospec8, prompt_ids, expected, name):
    """Each node is penalised by the committed tokens and the drafts on its root path
    (penalties.apply_tree_penalties): 8 penalised requests at once equal the no-spec server's."""
    params = {"temperature": 0, "max_new_tokens": MAX_NEW, **PENALTIES[name]}
    pairs = side_by_side(nospec8, tree_server, prompt_ids, params)
    assert [got["output_ids"] for _, got in pairs] == [want["output_ids"] for want, _ in pairs]
    assert [want["output_ids"] for want, _ in pairs] != expected  # the penalties changed outputs
    assert max(got["meta_info"]["spec_accept_length"] for _, got in pairs) > 1


def test_tensor_parallel_trees_equal_nospec_and_the_oracle(pair8, prompt_ids, expected):
    """--tp-size 2 (gloo, one core per rank), overlap worker, K 4, N 8 (budget B, the drafter's
    block, so every budget of the issue runs somewhere: B here, 2B and 4B above): the sharded drafter's
    logits gathered into whole rows on every rank, rank 0's node predictions on all. Four prompts
    one at a time (the oracle's verify counts: the same trees as TP=1), then all 8 at once, then
    law_matrix.SETTINGS (every rank commits rank 0's sampled tokens). Without the host-sync check
    (the TP=1 trees run under it): at TP=2 that debugging guard alters
    the sharded drafter's features, chain or tree, so acceptance drops while outputs stay exact
    (docs/tree.md)."""
    args = ["--tp-size", "2", *tree_args(pair8, 4, 8)]
    env = {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    with SGLangServer(pair8.target, args, env=env) as server:
        alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids[:4]]
        with ThreadPoolExecutor(len(prompt_ids)) as pool:
            together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
        target = load(pair8.target, pair8.draft)[1]
        assert_every_setting_follows_the_law("tree 8 nodes, TP=2, overlap worker", server, target, prompt_ids)
    assert [out["output_ids"] for out in alone] == expected[:4]
    for ids, out in zip(prompt_ids, alone, strict=False):
        assert out["meta_info"]["spec_verify_ct"] == len(tree_reference(pair8, ids, 7, 4).accept_lengths)
    assert [out["output_ids"] for out in together] == expected


def test_a_verify_width_below_the_block_fails_at_startup(pair8):
    args = tree_args(pair8, 4, 4)  # the drafter's block is 8
    words = ["--speculative-eagle-topk 4", "--speculative-num-draft-tokens 4"]
    assert_startup_fails_naming(pair8, args, words)


def test_a_tree_with_the_draft_window_fails_at_startup_naming_both(pair8):
    """Trees on hybrid targets start (test_hybrid_tree.py); with the draft window they do not yet
    (docs/tree.md says why; test_tree_verify.py covers every refusal engine-free)."""
    args = [*tree_args(pair8, 4, 16), "--speculative-draft-window-size", "12"]
    assert_startup_fails_naming(
        pair8, args, ["--speculative-eagle-topk 4", "--speculative-draft-window-size"]
    )


def test_logprobs_equal_nospec(tree_server, nospec8, prompt_ids):
    """The accepted path's logits move to the front of the block with its KV, so the logprobs the
    scheduler reads are each emitted token's, as a no-spec server computes them (to 1e-3: the tree
    mask attends in another order than no-spec's decode; ~5e-5 seen)."""
    body = {"input_ids": prompt_ids[6], "return_logprob": True, "top_logprobs_num": 3,
            "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW}}  # fmt: skip
    want, got = nospec8.post("/generate", body), tree_server.post("/generate", body)
    assert got["output_ids"] == want["output_ids"]
    assert got["meta_info"]["spec_accept_length"] > 1
    for key in ("output_token_logprobs", "output_top_logprobs"):
        w, g = want["meta_info"][key], got["meta_info"][key]
        flat = lambda rows: [x for row in rows for x in (row if isinstance(row[0], list) else [row])]  # noqa: E731
        assert [t for _, t, *_ in flat(g)] == [t for _, t, *_ in flat(w)]
        assert all(abs(a[0] - b[0]) < 1e-3 for a, b in zip(flat(g), flat(w), strict=True))


def test_the_sampled_law_of_a_tree_on_the_trained_pair(tmp_path):
    """law_case.py's trained pair and prompt, a 16-node tree (K 4) under the overlap worker: the
    law with the power of docs/reliability.md (the tree's target-only walk has no drafts' mass
    to judge, so the likelihood ratios here look at the laws themselves), and the joint law given
    where each token sat in its step, read from the server's step record (law_pattern.py: the
    judge whose power against a tree's classes of bugs tests/test_law_classes.py keeps)."""
    pair, target, _, prompt = trained_case()
    env = {**OVERLAP_CHECKED, **record_env(tmp_path)}
    with SGLangServer(pair.target, tree_args(pair, 4, 16), env=env) as server:
        path = "tree 16 nodes, overlap worker, trained pair"
        assert_every_setting_follows_the_law(path, server, target, [prompt], n=COMPLETIONS)
