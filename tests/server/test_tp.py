"""Our worker at --tp-size 2 on CPU (gloo, one core per rank), in real SGLang servers on 127.0.0.1:
the drafter sharded like the target, the TP-safe draft argmax, and every rank committing rank 0's
tokens. Greedy outputs equal a no-spec --tp-size 2 server and the engine-free (TP=1) reference
token for token, 5 prompts one at a time, 8 concurrent and on a radix-cache hit, under the overlap
worker with the verify policy users get (the adaptive width, per-request lengths; each step's
acceptance the reference's at the width it verified: the sharded drafter drafts what the
unsharded one does) and under the plain worker with a draft window of 8, which the outputs
outgrow. Each rank records what it handed the target every step (step_records.py): after greedy
and sampled requests together, both ranks' records are identical, ragged where the policy chose.
The drafters are variants SGLang's built-in loads (testing/tiny_variants.py), with an MLP width
SGLang pads for TP on CPU: the overlap worker's is DFlash2 (the vocab-parallel top-k,
the replicated selector) with sinks (sharded by head) and convolutions; under the plain worker,
without the window, a Laguna drafter (its gate sharded by head) with Domino's rollout (the full
logits gathered across ranks), sinks and convolutions, verify counts checked too; with the window,
the sinks and convolutions under the argmax chain, each request verifying its own length (a forced
cycle of per-request lengths, ragged verifies on both ranks). Under both workers, sampled requests at
law_matrix.SETTINGS (temperatures, filters, a penalty) follow the target's own law, controls fail.
A hybrid target (Gated DeltaNet heads sharded too), and its mixture-of-experts sibling (experts and the gated
shared expert sharded), equal transformers' greedy decoding under the overlap worker, both through
SGLang's ReplaySSM ring (DFLASH_SGLANG_REPLAY_SSM=1), the sibling at a forced cycle of per-request lengths,
and the hybrid one again with a tree of 16 nodes through the ring.

Servers: the three hybrid ones, then one no-spec and one per worker (at most two up at once); about
6 minutes in all.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.width.controller import ADAPTIVE_ENV
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_variants import write_variant_pair

from . import hybrid
from .conftest import dflash_args
from .law_case import COMPLETIONS, trained_case
from .law_matrix import assert_every_setting_follows_the_law
from .law_sampled import SampledDrafter
from .pairs import HOT_SHAPE, load, reference
from .step_records import (
    assert_each_step_accepted_what_the_reference_does,
    assert_the_target_saw_what_the_policy_chose,
    read_steps,
    record_env,
)

BLOCK = 4
MAX_NEW = 24
TP2 = ["--tp-size", "2"]
ONE_CORE_PER_RANK = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
WINDOW = 8  # the plain worker's drafter sees the last 8 committed tokens (the draft window)
PLAIN_TP2 = {"SGLANG_ENABLE_SPEC_V2": "", "SGLANG_ENABLE_DFLASH_SPEC_V2": "", **ONE_CORE_PER_RANK}
OVERLAP_TP2 = {"SGLANG_ENABLE_SPEC_V2": "1", **ONE_CORE_PER_RANK}
WORKERS = {
    # the verify policy as users launch it: the adaptive width, each request its own length
    "overlap": ({**OVERLAP_TP2, ADAPTIVE_ENV: ""}, []),
    "plain": (PLAIN_TP2, []),
    # ... and per-request verify lengths, forced through a cycle (step/ragged.py), so one ragged
    # verify at a time runs on both ranks
    "plain-window": (
        {**PLAIN_TP2, FORCED_LENGTHS_ENV: "4,1,3,2"},
        ["--speculative-draft-window-size", WINDOW],
    ),
}


@pytest.mark.parametrize(
    "experts,tree", [(0, False), (4, False), (0, True)], ids=["hybrid", "hybrid-moe", "hybrid-tree"]
)
def test_hybrid_target_equals_transformers_concurrently_and_on_a_radix_hit(tmp_path, experts, tree):
    """The tiny Qwen3.5-style pair (and its MoE sibling: 4 experts, top 2, a gated shared expert,
    as Qwen3.5-35B-A3B / 397B-A17B), overlap worker, extra_buffer state tracking, block 8: six
    prompts of 1-130 tokens at once, then the longest again from the radix cache (its tracked
    state reused on both ranks). The third case verifies a tree of 16 nodes through the ring on
    both ranks (tree/replay_ring.py). Its own server, gone before the others start."""
    pair = hybrid.make_hybrid_pair(tmp_path, experts)
    args = [*TP2, *hybrid.HYBRID_ARGS, *hybrid.EXTRA_BUFFER, *dflash_args(pair, hybrid.BLOCK)]
    env = {**hybrid.HYBRID_ENV, **OVERLAP_TP2, "DFLASH_SGLANG_REPLAY_SSM": "1"}
    if experts:  # each request its own length: ragged verifies through the ring on both ranks
        env[FORCED_LENGTHS_ENV] = "8,1,4,2,8,3,1,6"
    if tree:
        args += ["--speculative-eagle-topk", 4, "--speculative-num-draft-tokens", 16]
    prompts = hybrid.prompts()
    want = [hybrid.greedy(pair.target, ids, MAX_NEW) for ids in prompts]
    with SGLangServer(pair.target, args, env=env) as server:
        with ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(lambda ids: hybrid.generate(server, ids, MAX_NEW), prompts))
        again = hybrid.generate(server, prompts[-1], MAX_NEW)
        log = server.log_path.read_text()
    kept = "a record per tree node (our tree replay)" if tree else "folded every commit"
    assert f"verify scratch: SGLang's ReplaySSM ring, {kept}" in log
    if experts:
        assert "verify width forced per-request lengths" in log
    assert [out["output_ids"] for out in outs] == want
    assert any(out["meta_info"]["spec_accept_length"] > 1 for out in outs)
    assert again["meta_info"]["cached_tokens"] >= hybrid.TRACK_INTERVAL
    assert again["output_ids"] == want[-1]


# The drafters' MLP is 96 wide: not a multiple of SGLang's CPU TP alignment (tp x 32), so SGLang
# pads it to 128 as it pads an unaligned target, and the drafter's weights load padded.
UNALIGNED_DRAFT_MLP = 96
VARIANTS = {
    "overlap": ("dflash2", "sinks", "conv"),
    "plain": ("laguna", "domino", "sinks", "conv"),
    "plain-window": ("sinks", "conv"),
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp")
    mlp = UNALIGNED_DRAFT_MLP
    return {kind: write_variant_pair(root / kind, variants, 0, 8, HOT_SHAPE, intermediate_size=mlp)
            for kind, variants in VARIANTS.items()}  # fmt: skip


@pytest.fixture(scope="module")
def nospec(pairs):
    args = [*TP2, "--disable-overlap-schedule"]
    with SGLangServer(pairs["overlap"].target, args, env=ONE_CORE_PER_RANK) as server:
        yield server  # the target every pair shares


@pytest.fixture(scope="module", params=sorted(WORKERS))
def dflash(request, pairs, nospec, tmp_path_factory):
    env, extra = WORKERS[request.param]
    pair = pairs[request.param]
    steps = tmp_path_factory.mktemp("steps")  # each rank's record of its steps (step_records.py)
    env = {**env, **record_env(steps)}
    with SGLangServer(pair.target, [*TP2, *dflash_args(pair, BLOCK), *extra], env=env) as server:
        server.kind, server.pair, server.steps = request.param, pair, steps
        yield server


@pytest.fixture(scope="module")
def pair(pairs):
    return pairs["overlap"]  # for the tokenizer (one target)


@pytest.fixture(scope="module")
def prompt_ids(pair):
    tokenizer = load(pair.target, pair.draft)[0]
    words = "the quick brown fox jumps over the lazy dog while a small bird sings".split()
    texts = [" ".join(words[: 2 + 3 * i]) for i in range(8)]
    return [tokenizer(text)["input_ids"] for text in texts]


@pytest.fixture(scope="module")
def expected(nospec, prompt_ids):
    return [out["output_ids"] for out in nospec.generate(prompt_ids, MAX_NEW)]


def test_both_ranks_serve_our_worker(dflash):
    log = dflash.log_path.read_text()
    worker = "overlap.DFlashOverlapWorker" if dflash.kind == "overlap" else "worker.DFlashWorker"
    for rank in ("TP0", "TP1"):
        assert f"{rank}] dflash_sglang: DFLASH served by dflash_sglang.{worker}" in log


def test_greedy_equals_nospec_tp2_and_the_reference_one_at_a_time(dflash, prompt_ids, expected):
    accepted_more_than_one, served = 0, []
    for ids, want in zip(prompt_ids[:5], expected[:5], strict=True):
        out = dflash.generate(ids, MAX_NEW)
        ref = reference(dflash.pair, ids, MAX_NEW, BLOCK)
        assert out["output_ids"] == want == ref.tokens
        if dflash.kind == "plain":  # whole blocks: the reference's steps
            assert out["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)  # the same drafts
        served.append((ids, out))
        accepted_more_than_one += max(ref.accept_lengths) > 1
    assert accepted_more_than_one >= 3  # the accept path ran, not only rejections
    if dflash.kind == "overlap":  # the adaptive width: each step the reference's at its own width
        steps = read_steps(dflash.steps)
        assert_each_step_accepted_what_the_reference_does(dflash.pair, steps, served, BLOCK)


def test_eight_concurrent_requests_and_radix_hits(dflash, prompt_ids, expected):
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda ids: dflash.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in outs] == expected
    # Every prompt was served before: the prefix comes from the radix cache on both ranks.
    again = dflash.generate(prompt_ids[-1], MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0
    assert again["output_ids"] == expected[-1]


def test_the_sampled_law_with_real_filters_and_greedy_stays_exact(dflash, prompt_ids, expected):
    """law_matrix.SETTINGS in one mixed batch, each against the target's law and its control. A
    rank that committed other tokens than rank 0 would desynchronise the next collectives: the
    greedy requests after it still equal the no-spec server, and the server answers (no hang)."""
    path = {"overlap": "TP=2, overlap worker", "plain": "TP=2, plain worker, Laguna + Domino drafter",
            "plain-window": "TP=2, plain worker, draft window, per-request lengths"}  # fmt: skip
    _, target, _ = load(dflash.pair.target, dflash.pair.draft)
    assert_every_setting_follows_the_law(path[dflash.kind], dflash, target, prompt_ids)
    for ids, want in zip(prompt_ids[:3], expected[:3], strict=True):
        assert dflash.generate(ids, MAX_NEW)["output_ids"] == want


def test_both_ranks_handed_the_target_the_same_steps_the_policy_chose(dflash, prompt_ids, expected):
    """After pairs of a greedy and a sampled request (drafts fit them unlike), every rank's record
    (step_records.py) of every step so far: the same layout and lengths on both ranks, the verify
    ragged exactly where rank 0's choice was, and under the adaptive width each request's
    acceptance recorded at its own length. Ragged steps wherever the forced lengths differ; the
    adaptive width at TP=2 on two cores mostly decodes batches plain (0 to 6 ragged steps in
    about 450), so there it must have varied the width, and checks whatever ragged steps it chose."""
    for ids, want in zip(prompt_ids[:4], expected[:4], strict=True):
        with ThreadPoolExecutor(2) as pool:
            sampled = pool.submit(dflash.generate, ids, MAX_NEW, temperature=1.0)
            assert dflash.generate(ids, MAX_NEW)["output_ids"] == want and sampled.result()["output_ids"]
    ranks = [read_steps(dflash.steps, rank) for rank in (0, 1)]
    deadline = time.monotonic() + 30  # rank 1 may write its last line after rank 0 has answered
    while len(ranks[1]) < len(ranks[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
        ranks = [read_steps(dflash.steps, rank) for rank in (0, 1)]
    assert ranks[0] == ranks[1]  # a rank with lengths of its own would desynchronise the collectives
    steps = ranks[0]
    assert_the_target_saw_what_the_policy_chose(steps)
    ragged = [step for step in steps if step["target"]["layout"] == "ragged"]
    if dflash.kind == "plain-window":  # forced per-request lengths: ragged wherever they differ
        # (cycle 4,1,3,2: two requests' lengths always differ; a lone request's are one width)
        assert ragged and all(step["target"]["layout"] == "ragged" for step in steps if len(step["rids"]) > 1)
    if dflash.kind == "overlap":  # the adaptive width chose, rank 0's choice on both
        assert len({step["chose"]["width"] for step in steps}) >= 2
        assert all(step["recorded"] for step in ragged) and any(step["recorded"] for step in steps)


def test_the_sampled_law_at_tp2_on_the_trained_pair():
    """law_case.py's trained pair, where the bugs of speculative sampling show, under the overlap
    worker at TP=2, with drafts sampled from q (the default): every rank verifies rank 0's draws
    (step/tp_agreement.py) and commits rank 0's decision, or the law breaks. The judge sums the
    unseen drafts out (law_sampled.py); the startup line says the drafts are sampled."""
    pair, target, drafter, prompt = trained_case()
    args = [*TP2, *dflash_args(pair, drafter.block_size)]
    with SGLangServer(pair.target, args, env=OVERLAP_TP2) as server:
        assert "drafts at T > 0: sampled from the drafter's law" in server.log_path.read_text()
        path = "TP=2, overlap worker, trained pair"
        judge_with = SampledDrafter(drafter)
        assert_every_setting_follows_the_law(
            path, server, target, [prompt], n=COMPLETIONS, drafter=judge_with
        )
