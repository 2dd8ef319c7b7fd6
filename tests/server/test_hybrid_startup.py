"""Bad hybrid/DFLASH settings fail at startup with a message that names the options to change.
Each dies during SGLang's argument resolution, before the launcher starts any other process or
loads a model: resolution.py runs the launcher's own resolution calls on every command line in
one interpreter (one import instead of three server starts)."""

from __future__ import annotations

import pytest

from .hybrid import HYBRID_ARGS, HYBRID_ENV, make_hybrid_pair
from .resolution import launch, resolve

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
    # The ReplaySSM ring (opt-in): where our worker cannot take it, named.
    "ring-under-pd": (
        ["--enable-linear-replayssm-spec", "--disaggregation-mode", "decode"],
        {},
        ["DFlashConfigError", "--enable-linear-replayssm-spec", "--disaggregation-mode decode"],
    ),
    "ring-switch-misspelt": (
        [],
        {"DFLASH_SGLANG_REPLAY_SSM": "ring"},
        ["DFlashConfigError", "DFLASH_SGLANG_REPLAY_SSM='ring'"],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    pair = make_hybrid_pair(tmp_path_factory.mktemp("hybrid-startup"))
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft]
    launches = {name: (launch(pair.target, *dflash, *HYBRID_ARGS, *flags), env)
                for name, (flags, env, _) in CASES.items()}  # fmt: skip
    return resolve(launches, HYBRID_ENV)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_setting_fails_at_startup_naming_the_options(refusals, name):
    log = refusals[name]
    assert log is not None, f"{name} resolved"
    for word in CASES[name][2]:
        assert word in log, (word, log[-2000:])
