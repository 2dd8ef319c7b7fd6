"""Bad hybrid/DFLASH settings fail at startup with a message that names the options to change
(real `sglang.launch_server` processes on the tiny hybrid pair; each dies during argument
resolution, before any model loads)."""

from __future__ import annotations

import pytest

from dflash_sglang.testing.server import ServerError, SGLangServer

from .hybrid import HYBRID_ARGS, HYBRID_ENV, make_hybrid_pair

CASES = {
    "track-interval-below-block": (
        ["--speculative-num-draft-tokens", "8", "--mamba-scheduler-strategy", "extra_buffer",
         "--mamba-track-interval", "4"],
        {},
        ["DFlashConfigError", "--mamba-track-interval 4", "--speculative-num-draft-tokens 8"],
    ),
    "no_buffer-under-overlap": (
        ["--mamba-scheduler-strategy", "no_buffer"],
        {"SGLANG_ENABLE_SPEC_V2": "1"},
        ["DFlashConfigError", "no_buffer", "SGLANG_ENABLE_SPEC_V2", "extra_buffer"],
    ),
    "window-below-block": (
        ["--speculative-num-draft-tokens", "8", "--speculative-dflash-draft-window-size", "4"],
        {},
        ["--speculative-draft-window-size must be >=", "window_size=4, block_size=8"],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_hybrid_pair(tmp_path_factory.mktemp("hybrid-startup"))


@pytest.mark.parametrize("name", list(CASES))
def test_bad_setting_fails_at_startup_naming_the_options(pair, name):
    flags, env, words = CASES[name]
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            *HYBRID_ARGS, *flags]  # fmt: skip
    with pytest.raises(ServerError) as err:
        SGLangServer(pair.target, args, env={**HYBRID_ENV, **env}, timeout=240).start()
    log = err.value.args[0]
    for word in words:
        assert word in log, (word, log[-2000:])
