"""The seed cards' option names parse, through SGLang's own argument parser with the plugin
loaded by SGLang's loader, into the SGLang 0.5.23 fields they mean; bad values fail as SGLang's
own options do, and `--help` lists them."""

from __future__ import annotations

import subprocess
import sys

PARSE = """
import sys
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args
load_plugins()
args = prepare_server_args(["--model-path", "/unused", *sys.argv[1:]])
print(args.mamba_radix_cache_strategy, args.speculative_draft_window_size)
"""


def parse(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PARSE, *argv], capture_output=True, text=True, timeout=300)


def test_seed_card_names_set_sglangs_fields_and_defaults_stay():
    out = parse(
        "--mamba-scheduler-strategy", "extra_buffer", "--speculative-dflash-draft-window-size", "2048"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "extra_buffer 2048"
    default = parse()
    assert default.stdout.splitlines()[-1] == "auto None"


def test_bad_values_fail_like_sglangs_own_options():
    out = parse("--mamba-scheduler-strategy", "bogus")
    assert out.returncode != 0
    assert "argument --mamba-scheduler-strategy: invalid choice: 'bogus'" in out.stderr
    out = parse("--speculative-dflash-draft-window-size", "wide")
    assert out.returncode != 0
    assert "--speculative-dflash-draft-window-size: invalid int value" in out.stderr


def test_help_lists_the_aliases():
    out = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True, text=True, timeout=300
    )
    assert "--mamba-scheduler-strategy {auto,no_buffer,extra_buffer,extra_buffer_lazy}" in out.stdout
    assert "Alias of --speculative-draft-window-size" in " ".join(out.stdout.split())
