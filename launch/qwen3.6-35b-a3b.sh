#!/usr/bin/env bash
# Qwen3.6-35B-A3B with z-lab/Qwen3.6-35B-A3B-DFlash: the seed card's command, verbatim.
# Hybrid target (Gated DeltaNet + attention, MoE): dflash_sglang commits the recurrent state
# after verify (docs/hybrid.md) and accepts --mamba-scheduler-strategy as SGLang 0.5.23's
# --mamba-radix-cache-strategy. tests/server/test_seed_commands.py runs this command on CPU.
set -euo pipefail
# Optional: enable schedule overlapping (experimental, may not be stable)
# export SGLANG_ENABLE_SPEC_V2=1
# export SGLANG_ENABLE_DFLASH_SPEC_V2=1
# export SGLANG_ENABLE_OVERLAP_PLAN_STREAM=1

python -m sglang.launch_server \
    --model-path Qwen/Qwen3.6-35B-A3B \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path z-lab/Qwen3.6-35B-A3B-DFlash \
    --speculative-num-draft-tokens 16 \
    --tp-size 1 \
    --attention-backend fa3 \
    --mem-fraction-static 0.75 \
    --mamba-scheduler-strategy extra_buffer \
    --trust-remote-code
