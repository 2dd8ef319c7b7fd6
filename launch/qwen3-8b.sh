#!/usr/bin/env bash
# Qwen3-8B with z-lab/Qwen3-8B-DFlash-b16 on one GPU (dense target: served by dflash_sglang).
# Overlap scheduling: see docs/overlap.md once the overlap issue lands; today SGLang's overlap
# scheduler drives our worker unless --disable-overlap-schedule is given.
set -euo pipefail
python -m sglang.launch_server \
    --model-path Qwen/Qwen3-8B \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path z-lab/Qwen3-8B-DFlash-b16 \
    --speculative-num-draft-tokens 16 \
    --tp-size 1 \
    --attention-backend fa3 \
    --mem-fraction-static 0.75 \
    "$@"
