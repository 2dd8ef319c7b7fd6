"""The embedded trained pair (python/dflash_sglang/assets/tiny-pair) on a real SGLang server on
CPU: on its held-out prompts, DFLASH greedy output equals the target's own (a no-spec server), and
the trained drafter is accepted for well over one token per verify step.

The two servers run one after the other: each fixture collects its outputs and stops its server.
The DFLASH server starts as `make serve-dense` does, with SGLang's own spawned subprocesses.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.train import data
from dflash_sglang_tools.train.tiny_pair import ACCEPTANCE_FILE, EMBEDDED, embedded_pair, held_out_prompts

from .conftest import SPAWN

BLOCK = 8
MAX_NEW = 64
PAIR = embedded_pair()


@pytest.fixture(scope="module")
def prompt_ids():
    tokenizer = AutoTokenizer.from_pretrained(PAIR.target)
    return [data.prompt_ids(tokenizer, p) for p in held_out_prompts()]


@pytest.fixture(scope="module")
def nospec_outputs(prompt_ids):
    with SGLangServer(PAIR.target) as server:
        return server.generate(prompt_ids, MAX_NEW)


@pytest.fixture(scope="module")
def dflash_outputs(prompt_ids, nospec_outputs):  # after the no-spec server has stopped
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", PAIR.draft,
            "--speculative-num-draft-tokens", BLOCK]  # fmt: skip
    with SGLangServer(PAIR.target, args, env=SPAWN) as server:
        assert "subprocesses fork" not in server.log_path.read_text()  # spawned, as users run it
        return server.generate(prompt_ids, MAX_NEW)


def test_the_pair_ships_its_held_out_prompts_and_acceptance():
    recorded = json.loads((EMBEDDED / ACCEPTANCE_FILE).read_text())["greedy_acceptance_length"]
    assert set(recorded) == {"4", "8", "16"} and recorded["8"] > 1.5
    assert len(held_out_prompts()) >= 16


def test_dflash_equals_the_target_alone(dflash_outputs, nospec_outputs):
    assert [o["output_ids"] for o in dflash_outputs] == [o["output_ids"] for o in nospec_outputs]


def test_the_trained_drafter_is_accepted(dflash_outputs):
    # The first token comes from the prefill; every later one from a verify step.
    emitted = sum(o["meta_info"]["completion_tokens"] - 1 for o in dflash_outputs)
    steps = sum(o["meta_info"]["spec_verify_ct"] for o in dflash_outputs)
    print(f"tiny pair, block {BLOCK}: {emitted / steps:.2f} tokens per verify step")
    assert emitted / steps > 1.5
