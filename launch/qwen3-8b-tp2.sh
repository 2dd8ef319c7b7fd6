#!/usr/bin/env bash
# Qwen3-8B with z-lab/Qwen3-8B-DFlash-b16, tensor-parallel over 2 GPUs: the drafter is sharded
# like the target and every rank commits rank 0's tokens (docs/parallel.md). On CPU the same
# sharding runs over gloo (tests/server/test_tp.py, SGLANG_CPU_OMP_THREADS_BIND='0|1').
set -euo pipefail
python -m sglang.launch_server \
    --model-path Qwen/Qwen3-8B \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path z-lab/Qwen3-8B-DFlash-b16 \
    --speculative-num-draft-tokens 16 \
    --tp-size 2 \
    --attention-backend fa3 \
    --mem-fraction-static 0.75 \
    "$@"
