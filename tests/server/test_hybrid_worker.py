"""Our workers on the tiny Qwen3.5-style hybrid target (linear attention + full attention) on
`--device cpu`, float32, against transformers' greedy decoding of the target alone:

- plain worker, `no_buffer`, radix cache on, block 4, the verify width forced through 4,1,3,2,4,1;
- overlap worker, `extra_buffer`, radix cache off, block 16, on a target with one hot token (the
  longest accepted runs);
- overlap worker, `extra_buffer`, radix cache on, block 4, draft window 12 (the drafter reads only
  the last 12 tokens; prompts and outputs run far past it);
- overlap worker, `extra_buffer_lazy`, radix cache on, block 8, widths forced through 8,1,4,2,8,3,1,6;
- overlap worker, `extra_buffer`, track interval = block 8, on a target whose drafts are always
  accepted (its LM head is zero).
(The overlap worker with `extra_buffer`, radix cache on and block 8 runs in
test_hybrid_request_lengths.py, at forced per-request lengths, and in test_tp.py at TP=2.)

Each: prompts one at a time and concurrently equal the reference, also with an all-NaN drafter
swapped in (greedy exact, sampling law-exact; test_any_drafter.py covers more broken drafters on
the dense target); requests that extend a finished
one (prompt + its output) reuse the cached recurrent state (where the radix cache is on) and still
equal a fresh decode. Every case's sampled requests at law_matrix.SETTINGS (temperatures,
filters, a penalty) follow the target's law token by token, controls fail. On the two block-4
cases (sync and overlap worker), the core of the request-feature matrix (logprobs,
constrained output, penalties, min_new_tokens, logit_bias) equals a no-spec hybrid server's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dflash_sglang.sampling.sampled_drafts import SAMPLED_DRAFTS_ENV
from dflash_sglang.step.replay_choice import REPLAY_ENV
from dflash_sglang.width.controller import WIDTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_hybrid import (
    HybridShape,
    keep_full_attention_interval,
    write_tiny_hybrid_pair,
)

from .broken_drafters import drafter, drafter_weights
from .hybrid import (
    HYBRID_ARGS,
    HYBRID_ENV,
    MAX_NEW,
    TRACK_INTERVAL,
    assert_alone_and_concurrent_equal,
    assert_extension_equals_the_target,
    assert_request_features_equal_nospec,
    generate,
    greedy,
    load_target,
    prompts,
)
from .law_case import constant_draft_pair
from .law_drafts import ConstantDrafter
from .law_matrix import Setting, assert_every_setting_follows_the_law, assert_follows_the_law, most_uncertain

OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1", "DFLASH_SGLANG_CHECK_HOST_SYNC": "1"}
PLAIN = {"SGLANG_ENABLE_SPEC_V2": "", "SGLANG_ENABLE_DFLASH_SPEC_V2": ""}
EXTRA_BUFFER = ["--mamba-scheduler-strategy", "extra_buffer", "--mamba-track-interval", TRACK_INTERVAL]
NO_BUFFER = ["--mamba-scheduler-strategy", "no_buffer", "--disable-overlap-schedule"]
EXTRA_BUFFER_LAZY = [
    "--mamba-scheduler-strategy",
    "extra_buffer_lazy",
    "--mamba-track-interval",
    TRACK_INTERVAL,
]
AT_1_NOT_07 = Setting({"temperature": 1.0}, {"temperature": 0.7})
WINDOW_12 = ["--speculative-dflash-draft-window-size", 12]
HYBRID_INTERVAL = HybridShape().full_attention_interval

# Every case but one verifies through SGLang's ReplaySSM ring (the default for a chain on CPU too,
# asked for by name here all the same); the draft-window case keeps a state per block position
# (DFLASH_SGLANG_REPLAY_SSM=0).
RING = {REPLAY_ENV: "1"}
SNAPSHOTS = {**OVERLAP, REPLAY_ENV: "0"}
NO_RADIX = [*EXTRA_BUFFER, "--disable-radix-cache"]

# Two cases switch the verify width every step (width/controller.py): the state is committed at
# every width, plain decoding (width 1) included.
CYCLE_4, CYCLE_8 = {WIDTHS_ENV: "4,1,3,2,4,1"}, {WIDTHS_ENV: "8,1,4,2,8,3,1,6"}
CASES = {
    "plain-no_buffer-radix-b4-widths": ({**PLAIN, **CYCLE_4, **RING}, NO_BUFFER, 4, 3),
    "overlap-extra_buffer-noradix-b16": ({**OVERLAP, **RING}, NO_RADIX, 16, 1),
    "overlap-extra_buffer-radix-w12-b4-snapshots": (SNAPSHOTS, [*EXTRA_BUFFER, *WINDOW_12], 4, 3),
    "overlap-extra_buffer_lazy-radix-b8-widths": ({**OVERLAP, **CYCLE_8, **RING}, EXTRA_BUFFER_LAZY, 8, 3),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    env, flags, block, hot = CASES[request.param]
    root = tmp_path_factory.mktemp(f"hybrid-{request.param}")
    pair = write_tiny_hybrid_pair(root, seed=0, block_size=block, shape=HybridShape(hot_tokens=hot))
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
              "--speculative-num-draft-tokens", block]  # fmt: skip
    with SGLangServer(pair.target, [*HYBRID_ARGS, *flags, *dflash], env={**HYBRID_ENV, **env}) as server:
        expected = [greedy(pair.target, ids, MAX_NEW) for ids in prompts()]
        yield request.param, pair, server, expected


def test_our_worker_serves_it(case):
    name, _, server, _ = case
    worker = "overlap.DFlashOverlapWorker" if name.startswith("overlap") else "worker.DFlashWorker"
    log = server.log_path.read_text()
    assert f"DFLASH served by dflash_sglang.{worker}" in log
    if "-w12-" in name:  # the drafter reads its last 12 tokens from a ring of 12 + 4 slots each
        assert "draft window 12: draft KV pool of" in log and " x 16), target pool" in log
    if "lazy" in name:  # SGLang took the lazy strategy (its tracking planned at schedule time)
        assert "'mamba_radix_cache_strategy': 'extra_buffer_lazy'" in log
    if name.endswith("-snapshots"):
        assert f"verify scratch: a state per block position ({REPLAY_ENV}=0)" in log
        assert "GDN ReplaySSM ring buffers allocated" not in log
    else:  # SGLang's ring, no state per block position
        assert "verify scratch: SGLang's ReplaySSM ring, folded every commit" in log
        assert "GDN ReplaySSM ring buffers allocated" in log and "'enable_linear_replayssm_spec': True" in log


def test_one_at_a_time_and_concurrent_equal_the_target_alone(case):
    _, _, server, expected = case
    assert_alone_and_concurrent_equal(server, expected)


def test_extending_a_finished_request_reuses_its_state_exactly(case):
    name, pair, server, expected = case
    assert_extension_equals_the_target(server, pair.target, expected, radix="noradix" not in name)


LAW_PATHS = {
    "plain-no_buffer-radix-b4-widths": "hybrid no_buffer, plain worker, width cycle",
    "overlap-extra_buffer-noradix-b16": "hybrid extra_buffer, no radix cache, block 16, overlap worker",
    "overlap-extra_buffer-radix-w12-b4-snapshots": "hybrid draft window 12, overlap worker",
    "overlap-extra_buffer_lazy-radix-b8-widths": "hybrid extra_buffer_lazy, overlap worker, width cycle",
}
# The one-hot-token target needs longer completions for the penalty's control: its hot token must
# repeat for the penalty to move the law. Simulated from the law itself, 30 batches each: 24 tokens
# left the control at p 1e-8 to 1e-37 (CI once saw 4e-5, short of law_matrix.REJECT), 40 tokens at
# 1e-39 to 1e-209.
LAW_OPTIONS = {"overlap-extra_buffer-noradix-b16": {"max_new": 40}}


def test_the_sampled_law_with_real_filters_through_state_commits(case):
    """law_matrix.SETTINGS in one mixed batch, most tokens sampled from recurrent states that
    rejection-sampled commits wrote; each setting against the target's law and its control."""
    name, pair, server, _ = case
    model, options = load_target(pair.target), LAW_OPTIONS.get(name, {})
    assert_every_setting_follows_the_law(LAW_PATHS[name], server, model, prompts(), **options)


def test_the_sampled_law_with_power_through_state_commits(tmp_path_factory):
    """law_case.constant_draft_pair on the hybrid target (overlap worker, extra_buffer, block 4):
    every draft is token 0, likely yet uncertain and accepted about half the time, so a wrong
    acceptance, residual or committed state shows (docs/reliability.md); the drafts are known,
    so the likelihood ratios see each draft's mass (point drafts: SAMPLED_DRAFTS_ENV=0)."""
    pair = write_tiny_hybrid_pair(tmp_path_factory.mktemp("hybrid-power"), 0, 4, HybridShape(hot_tokens=3))
    constant_draft_pair(pair, lambda target: keep_full_attention_interval(target, HYBRID_INTERVAL))
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
              "--speculative-num-draft-tokens", 4]  # fmt: skip
    with SGLangServer(
        pair.target,
        [*HYBRID_ARGS, *EXTRA_BUFFER, *dflash],
        env={**HYBRID_ENV, **OVERLAP, **RING, SAMPLED_DRAFTS_ENV: "0"},
    ) as server:
        path, model = "hybrid extra_buffer, overlap worker, constant drafts", load_target(pair.target)
        assert_every_setting_follows_the_law(path, server, model, prompts(), drafter=ConstantDrafter(0, 4))


def silence_head(target_dir) -> None:
    """Zero the target's LM head: every logit is 0, so greedy picks token 0 everywhere and the
    drafter, which shares the head, drafts exactly that: every draft is accepted."""
    target = load_target(target_dir)
    with torch.no_grad():
        target.lm_head.weight.zero_()
    target.save_pretrained(target_dir)
    keep_full_attention_interval(target_dir, HybridShape().full_attention_interval)
    load_target.cache_clear()


def test_full_acceptance_commits_the_last_block_step(tmp_path):
    """Whole blocks accepted: the state commit takes step B-1 every time, and the state tracked
    at a boundary inside an accepted block (interval 64) serves a later radix hit. (The output
    cannot show a wrong state here, as it ignores the state; the other cases do. This one is for
    the indices at the block's end.)"""
    block, new = 8, 60
    pair = write_tiny_hybrid_pair(tmp_path, seed=0, block_size=block, shape=HybridShape())
    silence_head(pair.target)
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
              "--speculative-num-draft-tokens", block]  # fmt: skip
    args = [*HYBRID_ARGS, *EXTRA_BUFFER, *dflash]
    short = prompts()[2:5]  # 9, 31 and 70 tokens: decoding 60 crosses 64 or 128
    with SGLangServer(pair.target, args, env={**HYBRID_ENV, **OVERLAP}) as server:
        first = [generate(server, ids, new) for ids in short]
        longer = [ids + out["output_ids"] for ids, out in zip(short, first, strict=True)]
        again = [generate(server, ids, 9) for ids in longer]
    for ids, out in zip(short, first, strict=True):
        assert out["output_ids"] == greedy(pair.target, ids, new) == [0] * new
        # the first token comes from the prefill, the other new - 1 in whole blocks
        assert out["meta_info"]["spec_verify_ct"] == -(-(new - 1) // block)
    for ids, prompt, out in zip(longer, short, again, strict=True):
        assert out["output_ids"] == greedy(pair.target, ids, 9)
        # a state tracked while decoding: past the prompt, on the 64-token grid
        cached = out["meta_info"]["cached_tokens"]
        assert cached > len(prompt) and cached % TRACK_INTERVAL == 0, (len(prompt), cached)


@pytest.fixture(scope="module")
def hybrid_nospec(tmp_path_factory):
    """A no-spec server of the block-4 cases' target (same seed and shape), synchronous loop."""
    pair = write_tiny_hybrid_pair(
        tmp_path_factory.mktemp("hybrid-nospec-b4"), seed=0, block_size=4, shape=HybridShape(hot_tokens=3)
    )
    with SGLangServer(pair.target, [*HYBRID_ARGS, *NO_BUFFER], env=HYBRID_ENV) as server:
        yield server


@pytest.mark.parametrize(
    "case", ["plain-no_buffer-radix-b4-widths", "overlap-extra_buffer-radix-w12-b4-snapshots"], indirect=True
)
def test_request_features_equal_nospec(case, hybrid_nospec):
    """The request-feature matrix's core (test_request_features.py) on a hybrid target: logprobs,
    constrained output and penalties through the recurrent-state commits, alone and together."""
    assert_request_features_equal_nospec(case[2], hybrid_nospec)


def test_a_nan_drafter_leaves_output_exact(case):
    """Last of each case's tests: the weight update flushes the radix cache the others reuse.
    A drafter whose weights are all NaN (swapped in through the drafter-only weight update): greedy
    output still equals the target alone, and at temperature 1 every sampled token still follows
    the target's law through the state commits (law_matrix: p > 1e-4, and the same samples fail
    against temperature 0.7): no NaN reaches a commit."""
    _, pair, server, expected = case
    with drafter(server, drafter_weights(pair.draft), "nan"):
        with ThreadPoolExecutor(len(expected)) as pool:
            assert [
                out["output_ids"] for out in pool.map(lambda ids: generate(server, ids), prompts())
            ] == expected
        prompt = most_uncertain(load_target(pair.target), prompts())  # the most power per token
        params = {"temperature": 1.0, "max_new_tokens": 16, "ignore_eos": True}
        body = {"input_ids": [prompt] * 64, "sampling_params": params}
        sampled = server.post("/generate", body, timeout=900)  # every draft rejected: 16 steps each
    completions = [out["output_ids"] for out in sampled]
    assert_follows_the_law(AT_1_NOT_07, load_target(pair.target), prompt, completions)
    assert [out["output_ids"] for out in map(lambda ids: generate(server, ids), prompts()[:2])] == expected[
        :2
    ]
