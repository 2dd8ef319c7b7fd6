#!/usr/bin/env bash
# Qwen3.5-27B with z-lab/Qwen3.5-27B-DFlash at TP4, as the public Qwen3.5-27B DFlash numbers run.
# Hybrid target: the linear-attention heads are sharded by SGLang, the recurrent-state commit is
# per rank (docs/hybrid.md, docs/parallel.md).
set -euo pipefail
# export SGLANG_ENABLE_SPEC_V2=1   # the overlap worker (docs/overlap.md)
python -m sglang.launch_server \
    --model-path Qwen/Qwen3.5-27B \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path z-lab/Qwen3.5-27B-DFlash \
    --speculative-num-draft-tokens 16 \
    --tp-size 4 \
    --attention-backend fa3 \
    --mem-fraction-static 0.75 \
    --mamba-scheduler-strategy extra_buffer \
    --trust-remote-code \
    "$@"
