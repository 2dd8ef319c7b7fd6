#!/usr/bin/env bash
# Qwen3.5-397B-A17B (hybrid MoE) at TP8, as the frontier announcement runs it. The drafter is
# "coming soon" on the model cards: point DRAFTER at it (a local path or a hub id) when it exists.
set -euo pipefail
DRAFTER="${DRAFTER:-z-lab/Qwen3.5-397B-A17B-DFlash}"
export SGLANG_ENABLE_SPEC_V2=1   # the overlap worker, drafter on its own stream (docs/overlap.md)
python -m sglang.launch_server \
    --model-path Qwen/Qwen3.5-397B-A17B \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path "$DRAFTER" \
    --speculative-num-draft-tokens 16 \
    --tp-size 8 \
    --attention-backend fa3 \
    --mem-fraction-static 0.8 \
    --mamba-scheduler-strategy extra_buffer \
    --trust-remote-code \
    "$@"
