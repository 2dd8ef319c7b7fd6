"""Session-wide pieces of the server tests, shared by every module that needs them (a server costs
about a minute to start on this 2-core machine):

- `pair8`: the hot tiny pair, written for block size 8;
- `nospec8`: a no-spec server of its target under SGLang's synchronous loop, the exact reference:
  its overlap loop feeds penalties the previous token one step late
  (`ScheduleBatch.cumulate_penalty_output_tokens` reads `req.output_ids` before the last step's
  result is processed), so penalised requests differ from the synchronous loop's;
- `dflash8_overlap` and `dflash8_plain`: our overlap worker (SGLANG_ENABLE_DFLASH_SPEC_V2=1, with
  the host-sync check) and our plain worker (no overlap flag) at block 4 on that pair.
All three accept custom logit processors and return_hidden_states, so every request kind the
request-feature matrix sends reaches them.

Every server of the session forks its subprocesses instead of spawning them
(cpu/platform/fork_launch.py: each spawn imports SGLang again, about 20 s of a 45 s start here), except
those that run the README's own commands (test_tiny_pair, test_seed_commands), which keep
SGLang's spawn.
"""

import os

import pytest

from dflash_sglang.width.controller import ADAPTIVE_ENV
from dflash_sglang_tools.testing.server import SGLangServer

from .pairs import make_pair

FEATURE_FLAGS = ["--enable-custom-logit-processor", "--enable-return-hidden-states"]
SHARED_BLOCK = 4
OVERLAP_CHECKED = {"SGLANG_ENABLE_SPEC_V2": "1", "DFLASH_SGLANG_CHECK_HOST_SYNC": "1"}
PLAIN = {"SGLANG_ENABLE_SPEC_V2": "", "SGLANG_ENABLE_DFLASH_SPEC_V2": ""}


SPAWN = {"DFLASH_SGLANG_FORK_SUBPROCESSES": ""}  # SGLang's own start method, as users run it


@pytest.fixture(scope="session", autouse=True)
def whole_block_widths():
    """Every server verifies whole blocks unless its test sets DFLASH_SGLANG_ADAPTIVE_WIDTH (the
    adaptive width is the default on CPU): the oracles count the verify steps of whole blocks.
    test_verify_width's adaptive server unsets it and runs the default."""
    previous = os.environ.get(ADAPTIVE_ENV)
    os.environ[ADAPTIVE_ENV] = "0"
    yield
    if previous is None:
        del os.environ[ADAPTIVE_ENV]
    else:
        os.environ[ADAPTIVE_ENV] = previous


@pytest.fixture(scope="session", autouse=True)
def fork_server_subprocesses():
    previous = os.environ.get("DFLASH_SGLANG_FORK_SUBPROCESSES")
    os.environ["DFLASH_SGLANG_FORK_SUBPROCESSES"] = "1"
    yield
    if previous is None:
        del os.environ["DFLASH_SGLANG_FORK_SUBPROCESSES"]
    else:
        os.environ["DFLASH_SGLANG_FORK_SUBPROCESSES"] = previous


def dflash_args(pair, block: int) -> list:
    return ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-num-draft-tokens", block]  # fmt: skip


@pytest.fixture(scope="session")
def pair8(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair8"), 8)


@pytest.fixture(scope="session")
def nospec8(pair8):
    with SGLangServer(pair8.target, ["--disable-overlap-schedule", *FEATURE_FLAGS]) as server:
        yield server


@pytest.fixture(scope="session")
def dflash8_overlap(pair8):
    args = [*dflash_args(pair8, SHARED_BLOCK), *FEATURE_FLAGS]
    # The seed cards' DFLASH-specific flag (test_worker_startup checks the worker it selects).
    env = {**PLAIN, "SGLANG_ENABLE_DFLASH_SPEC_V2": "1", "DFLASH_SGLANG_CHECK_HOST_SYNC": "1"}
    with SGLangServer(pair8.target, args, env=env) as server:
        yield server


@pytest.fixture(scope="session")
def dflash8_plain(pair8):
    args = [*dflash_args(pair8, SHARED_BLOCK), *FEATURE_FLAGS]
    with SGLangServer(pair8.target, args, env=PLAIN) as server:
        yield server


def pytest_terminal_summary(terminalreporter):
    """The law matrix of this session (law_matrix.py): p-value / control p-value per setting."""
    from .law_matrix import matrix_lines

    lines = matrix_lines()
    if lines:
        terminalreporter.section("sampled law: p-value / negative control p-value")
        for line in lines:
            terminalreporter.write_line(line)
