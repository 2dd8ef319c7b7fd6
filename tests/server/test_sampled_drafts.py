"""Drafts sampled from the drafter's law (the default at T > 0; the servers set it) on a real
server: greedy requests beside sampled ones equal to the engine-free reference, and the startup
line (the chain's sampled law, with the power of the bugs' own laws, is test_worker.py's); the
same drafts verified as a block (`--speculative-use-block-verification`) at per-request lengths,
its law; and DFlash2's sampled walk (SGLang's sample_path) on a DFlash2 drafter, its law and
startup line. The exactness of the verify with a proposal q and the power of its law check
against this code's bugs are in tests/test_sampled_drafts.py, tests/test_block_verify.py and
tests/cpu/test_drafter_variants.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.sampling.sampled_drafts import SAMPLED_DRAFTS_ENV
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer, log_tail
from dflash_sglang_tools.testing.tiny_dense import TinyPair
from dflash_sglang_tools.train import data
from dflash_sglang_tools.train.tiny_pair import embedded_pair, held_out_prompts

from .conftest import PLAIN, dflash_args
from .law_case import COMPLETIONS, FIRST_BLOCKS, trained_case
from .law_matrix import assert_every_setting_follows_the_law
from .law_sampled import SampledDrafter
from .pairs import load, reference
from .step_records import record_env
from .test_worker import OVERLAP_CHECKED_DFLASH

MAX_NEW = 24


@pytest.fixture(scope="module")
def case():
    return trained_case()


@pytest.fixture(scope="module")
def server(case):
    pair, _, drafter, _ = case
    env = {**OVERLAP_CHECKED_DFLASH, SAMPLED_DRAFTS_ENV: "1"}
    with SGLangServer(pair.target, dflash_args(pair, drafter.block_size), env=env) as server:
        yield server


def test_the_startup_line_says_the_drafts_are_sampled(server):
    assert "drafts at T > 0: sampled from the drafter's law" in log_tail(server.log_path, lines=400)


def test_greedy_requests_beside_sampled_ones_equal_the_reference(case, server):
    pair, _, drafter, prompt = case
    prompts = [prompt[: len(prompt) - k] for k in range(4)]
    with ThreadPoolExecutor(2) as pool:
        sampled = pool.submit(server.generate, [prompt] * 8, MAX_NEW, temperature=1.0)
        greedy = pool.submit(server.generate, prompts, MAX_NEW)
        outs = greedy.result()
        assert len(sampled.result()) == 8
    for ids, out in zip(prompts, outs, strict=True):
        assert out["output_ids"] == reference(pair, ids, MAX_NEW, drafter.block_size).tokens


# Each request's own verify length, cycling step by step (step/ragged.py): plain steps, blocks
# cut short and whole ones judged side by side in one ragged step.
PER_REQUEST = {FORCED_LENGTHS_ENV: "4,1,3,2"}


@pytest.fixture(scope="module")
def blocks(case, tmp_path_factory):
    """Sampled drafts verified as a block (SGLang's flag; SGLang refuses it off CUDA, the plugin
    lets it through for DFLASH on CPU), under the plain worker, at per-request lengths."""
    pair, _, drafter, _ = case
    args = [*dflash_args(pair, drafter.block_size), "--speculative-use-block-verification"]
    env = {**PLAIN, SAMPLED_DRAFTS_ENV: "1", **PER_REQUEST, **record_env(tmp_path_factory.mktemp("blocks"))}
    with SGLangServer(pair.target, args, env=env) as server:
        yield server


def test_block_verification_keeps_the_law_and_greedy_stays_exact(case, blocks):
    pair, target, drafter, prompt = case
    startup = log_tail(blocks.log_path, lines=400)
    assert "sampled from the drafter's law" in startup
    assert "verified as a block (--speculative-use-block-verification)" in startup
    assert "forced per-request lengths [4, 1, 3, 2]" in startup
    assert_every_setting_follows_the_law(
        "chain, sampled drafts, block verification, per-request lengths, plain worker",
        blocks, target, [prompt], n=COMPLETIONS, drafter=SampledDrafter(drafter, block_verified=True),
        first=FIRST_BLOCKS,
    )  # fmt: skip
    out = blocks.generate(prompt, MAX_NEW)
    assert out["output_ids"] == reference(pair, prompt, MAX_NEW, drafter.block_size).tokens


@pytest.fixture(scope="module")
def dflash2():
    """The DFlash2 drafter trained for the embedded pair's target (make tiny-dflash2), block 8."""
    pair = embedded_pair()
    pair = TinyPair(pair.target, pair.target.parent / "draft-dflash2")
    env = {**OVERLAP_CHECKED_DFLASH, SAMPLED_DRAFTS_ENV: "1"}
    with SGLangServer(pair.target, dflash_args(pair, 8), env=env) as server:
        server.pair = pair
        yield server


def test_a_trained_dflash2_drafter_samples_its_walk_keeps_the_law_and_greedy_stays_exact(dflash2):
    """The trained selector's walk drafts the target's likely yet uncertain tokens, so the judge
    has drafts worth judging (a random DFlash2 drafter's rarely were); its walk's power against
    SGLang's own code is in-process (tests/cpu/test_drafter_variants.py)."""
    assert "drafts at T > 0: DFlash2's sampled walk" in log_tail(dflash2.log_path, lines=400)
    tokenizer, target, _ = load(dflash2.pair.target, dflash2.pair.draft)
    prompts = [data.prompt_ids(tokenizer, p) for p in held_out_prompts()[:8]]
    assert_every_setting_follows_the_law(
        "DFlash2 drafter (trained), sampled walk, overlap worker", dflash2, target, prompts
    )
    out = dflash2.generate(prompts[0], MAX_NEW)
    assert out["output_ids"] == reference(dflash2.pair, prompts[0], MAX_NEW, 8).tokens
