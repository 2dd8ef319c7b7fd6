"""The seed cards' option names parse, through SGLang's own argument parser with the plugin
loaded by SGLang's loader, into the SGLang 0.5.23 fields they mean; bad values fail as SGLang's
own options do, and `--help` lists them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# One interpreter parses every case (importing SGLang takes most of the time): per case, the
# fields the aliases set, or argparse's error message.
PARSE = """
import contextlib, io, json, sys
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args
load_plugins()
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(["--model-path", "/unused", *argv])
        print(json.dumps([args.mamba_radix_cache_strategy, args.speculative_draft_window_size]))
    except SystemExit:
        print(json.dumps({"error": err.getvalue()}))
"""

CASES = {
    "seed names": [
        "--mamba-scheduler-strategy",
        "extra_buffer",
        "--speculative-dflash-draft-window-size",
        "2048",
    ],
    "defaults": [],
    "bad strategy": ["--mamba-scheduler-strategy", "bogus"],
    "bad window": ["--speculative-dflash-draft-window-size", "wide"],
}


@pytest.fixture(scope="module")
def parsed() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PARSE, json.dumps(list(CASES.values()))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith(("[", "{"))]
    return dict(zip(CASES, results, strict=True))


def test_seed_card_names_set_sglangs_fields_and_defaults_stay(parsed):
    assert parsed["seed names"] == ["extra_buffer", 2048]
    assert parsed["defaults"] == ["auto", None]


def test_bad_values_fail_like_sglangs_own_options(parsed):
    assert "argument --mamba-scheduler-strategy: invalid choice: 'bogus'" in parsed["bad strategy"]["error"]
    assert "--speculative-dflash-draft-window-size: invalid int value" in parsed["bad window"]["error"]


def test_help_lists_the_aliases():
    out = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True, timeout=300
    )
    assert "--mamba-scheduler-strategy {auto,no_buffer,extra_buffer,extra_buffer_lazy}" in out.stdout
    assert "Alias of --speculative-draft-window-size" in " ".join(out.stdout.split())
