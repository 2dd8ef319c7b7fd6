"""The hybrid seed commands (launch/qwen3.5-27b.sh, launch/qwen3.6-35b-a3b.sh: the model cards'
commands verbatim) parse and serve with this package installed: their SGLang arguments, read from
the scripts, with the tiny hybrid pair for the two model paths and the GPU-only choices swapped
for CPU ones (`--attention-backend fa3` -> torch_native, the memory fraction, the CPU flags), and
the seed cards' overlap variables set, SGLang's own spawned subprocesses. Greedy output equals
transformers' on the target alone. The Qwen3.5 card serves the seed-shaped pair `make serve` ships
(assets/seed-hybrid-pair: 16 layers, a one-layer drafter at block 16), so its drafter's acceptance
is a trained one's."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from dflash_sglang_tools.testing.server import CPU_ARGS, SGLangServer
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair
from dflash_sglang_tools.train import data
from dflash_sglang_tools.train.seed_hybrid_pair import EMBEDDED_SEED, embedded_seed_pair
from dflash_sglang_tools.train.tiny_pair import held_out_prompts

from .conftest import SPAWN
from .hybrid import HYBRID_ARGS, HYBRID_ENV, greedy, prompts

LAUNCH = Path(__file__).resolve().parents[2] / "launch"
SEED_OVERLAP = {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ENABLE_DFLASH_SPEC_V2": "1",
                "SGLANG_ENABLE_OVERLAP_PLAN_STREAM": "1"}  # fmt: skip
ACCEPTED = 4.0  # the pair's build measured ACCEPTANCE_FILE's >= 4.5 over 96 new tokens; these are 48
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
    """qwen3.5-27b.sh serves the seed-shaped pair (assets/seed-hybrid-pair) on its held-out chat
    prompts, its drafter accepted for at least ACCEPTED tokens a verify step at the card's block 16;
    qwen3.6-35b-a3b.sh a random one on token ids."""
    args = seed_arguments(LAUNCH / script)
    assert "--mamba-scheduler-strategy" in args and "extra_buffer" in args  # the seed card's names
    trained = script == "qwen3.5-27b.sh"
    if trained:
        pair = embedded_seed_pair()
        tokenizer = AutoTokenizer.from_pretrained(pair.target)
        asks = [data.prompt_ids(tokenizer, p) for p in held_out_prompts(EMBEDDED_SEED)[:8]]
    else:
        pair = write_tiny_hybrid_pair(tmp_path, seed=0, block_size=16, shape=HybridShape(hot_tokens=3))
        asks = prompts()[2:4]
    args = for_cpu(args, pair.target, pair.draft)
    model_path = args[args.index("--model-path") + 1]
    cpu_only = [a for a in CPU_ARGS if a not in ("--attention-backend", "torch_native")]
    extra = [a for a in args if a not in ("--model-path", model_path)]
    with SGLangServer(model_path, [*extra, *HYBRID_ARGS], base_args=cpu_only,
                      env={**HYBRID_ENV, **SEED_OVERLAP, **SPAWN}) as server:  # fmt: skip
        log = server.log_path.read_text()
        assert "DFLASH served by dflash_sglang.overlap.DFlashOverlapWorker" in log
        # The card's command with DFLASH_SGLANG_REPLAY_SSM unset: a chain on CPU takes the ring.
        assert "verify scratch: SGLang's ReplaySSM ring, folded every commit" in log
        outs = [server.generate(ids, 24, ignore_eos=True) for ids in asks[:2]]
        assert [out["output_ids"] for out in outs] == [greedy(pair.target, ids, 24) for ids in asks[:2]]
        if trained:
            outs = server.generate(asks, 48)
    if trained:  # the first token comes from the prefill, every later one from a verify step
        emitted = sum(out["meta_info"]["completion_tokens"] - 1 for out in outs)
        steps = sum(out["meta_info"]["spec_verify_ct"] for out in outs)
        assert emitted / steps >= ACCEPTED, emitted / steps
