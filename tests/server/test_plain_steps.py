"""A plain step costs a plain step (issue 64): a decode step that verifies no draft (width 1 for the
whole batch) draws its tokens through SGLang's own sampler (sampling/plain_draw.py), not through
the speculative verify's coins and row laws.

The proof is the random stream itself. Two servers of one target under SGLang's overlap loop, one
without speculation and ours pinned to width 1 (`DFLASH_SGLANG_VERIFY_WIDTHS=1`), both started with
the same `--random-seed`, get the same sampled requests one at a time: their outputs are
token-identical at T > 0, filters included. That holds only if every token of ours comes from the
same draw no-spec makes (the same law, the same filters, the same generator calls in the same
order): a step that spent a coin, drew by another method or from another row would diverge at
its first sampled token. Without the plain draw (the sampled verify at width 1) the first request
already differs. Penalties are left out: no-spec's overlap loop feeds its penalizers one token
late (conftest.py), so its penalised outputs are not the target's exact law to compare with.

Two servers, one after the other's fixture (module scope).
"""

from __future__ import annotations

import pytest

from dflash_sglang.width.controller import WIDTHS_ENV
from dflash_sglang_tools.testing.server import SGLangServer, log_tail

from .conftest import dflash_args
from .pairs import word_prompts

SEED = ["--random-seed", "5"]
OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1"}
# The sampling settings a user sends, filters included (each request its own).
SETTINGS = [
    {"temperature": 1.0},
    {"temperature": 0.8, "top_p": 0.9},
    {"temperature": 1.0, "top_k": 20},
    {"temperature": 0.7, "min_p": 0.05},
    {"temperature": 0.0},
]
MAX_NEW = 24


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    return word_prompts(pair8, count=4)


def sequential_outputs(server: SGLangServer, prompt_ids) -> list[list[int]]:
    """Every prompt under every setting, one request at a time (batches of one on both servers)."""
    return [
        server.generate(ids, max_new_tokens=MAX_NEW, **setting)["output_ids"]
        for setting in SETTINGS
        for ids in prompt_ids
    ]


@pytest.fixture(scope="module")
def nospec_outputs(pair8, prompt_ids):
    with SGLangServer(pair8.target, SEED, env=OVERLAP) as server:
        return sequential_outputs(server, prompt_ids)


@pytest.fixture(scope="module")
def plain_outputs(pair8, prompt_ids, nospec_outputs):
    args = [*dflash_args(pair8, 8), *SEED]
    with SGLangServer(pair8.target, args, env={**OVERLAP, WIDTHS_ENV: "1"}) as server:
        # A dense target without captured graphs: the plain step's forward is SGLang's decode step.
        assert "a plain step runs SGLang's decode forward" in log_tail(server.log_path, lines=400)
        return sequential_outputs(server, prompt_ids)


def test_a_plain_step_draws_what_the_no_spec_sampler_draws(nospec_outputs, plain_outputs):
    """Token-identical at T 0.7-1.0 with top-p, top-k and min-p, and greedy: the same random stream."""
    assert len(plain_outputs) == len(nospec_outputs) == len(SETTINGS) * 4
    assert sum(len(out) for out in nospec_outputs) > len(SETTINGS) * 4 * MAX_NEW // 2  # decode steps ran
    different = [i for i, (a, b) in enumerate(zip(plain_outputs, nospec_outputs, strict=True)) if a != b]
    assert not different, f"requests {different} (prompt-major by setting) differ from no-spec's draws"
