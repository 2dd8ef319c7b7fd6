#!/usr/bin/env bash
# DFLASH on CPU with the embedded tiny pair: the seed card's command, with CPU flags and the
# trained tiny models shipped in the package (make tiny-pair regenerates them). The drafter is
# trained at block size 8; BLOCK=4 or BLOCK=16 serve it too.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PAIR=${PAIR:-python/dflash_sglang/assets/tiny-pair}
PORT=${PORT:-30000}
BLOCK=${BLOCK:-8}

exec "$PY" -m sglang.launch_server \
    --model-path "$PAIR/target" \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path "$PAIR/draft" \
    --speculative-num-draft-tokens "$BLOCK" \
    --device cpu \
    --dtype float32 \
    --attention-backend torch_native \
    --max-total-tokens 8192 \
    --sleep-on-idle \
    --host 127.0.0.1 \
    --port "$PORT" \
    "$@"
