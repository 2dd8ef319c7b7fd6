"""The hybrid seed commands (launch/qwen3.5-27b.sh, launch/qwen3.6-35b-a3b.sh: the model cards'
commands verbatim) parse and serve with this package installed: their SGLang arguments, read from
the scripts, with the tiny hybrid pair for the two model paths and the GPU-only choices swapped
for CPU ones (`--attention-backend fa3` -> torch_native, the memory fraction, the CPU flags), and
the seed cards' overlap variables set, SGLang's own spawned subprocesses. Greedy output equals
transformers' on the target alone."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dflash_sglang_tools.testing.server import CPU_ARGS, SGLangServer
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

from .conftest import SPAWN
from .hybrid import HYBRID_ARGS, HYBRID_ENV, greedy, prompts

LAUNCH = Path(__file__).resolve().parents[2] / "launch"
SEED_OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ENABLE_DFLASH_SPEC_V2": "1",
                "SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1"}  # fmt: skip
GPU_ONLY = {"--attention-backend": "torch_native", "--mem-fraction-static": "0.5"}


def seed_arguments(script: Path) -> list[str]:
    """The launch_server arguments of the script's command (after `python -m sglang.launch_server`)."""
    text = script.read_text().replace("\\\n", " ")
    (command,) = [line for line in text.splitlines() if line.startswith("python -m sglang.launch_server")]
    return shlex.split(command)[3:]


def for_cpu(args: list[str], target: Path, draft: Path) -> list[str]:
    swap = {"--model-path": str(target), "--speculative-draft-model-path": str(draft), **GPU_ONLY}
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg in swap:
            out[i + 1] = swap[arg]
    return out


@pytest.mark.parametrize("script", ["qwen3.5-27b.sh", "qwen3.6-35b-a3b.sh"])
def test_seed_command_parses_and_serves_on_the_tiny_hybrid_pair(script, tmp_path):
    args = seed_arguments(LAUNCH / script)
    assert "--mamba-scheduler-strategy" in args and "extra_buffer" in args  # the seed card's names
    pair = write_tiny_hybrid_pair(tmp_path, seed=0, block_size=16, shape=HybridShape(hot_tokens=3))
    args = for_cpu(args, pair.target, pair.draft)
    model_path = args[args.index("--model-path") + 1]
    cpu_only = [a for a in CPU_ARGS if a not in ("--attention-backend", "torch_native")]
    extra = [a for a in args if a not in ("--model-path", model_path)]
    with SGLangServer(model_path, [*extra, *HYBRID_ARGS], base_args=cpu_only,
                      env={**HYBRID_ENV, **SEED_OVERLAP, **SPAWN}) as server:  # fmt: skip
        assert "DFLASH served by dflash_sglang.overlap.DFlashOverlapWorker" in server.log_path.read_text()
        for ids in prompts()[2:4]:
            out = server.generate(ids, 24, ignore_eos=True)
            assert out["output_ids"] == greedy(pair.target, ids, 24)
