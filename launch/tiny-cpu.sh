#!/usr/bin/env bash
# DFLASH on CPU with the tiny pair: the seed card's command, with CPU flags and the tiny models.
# The pair is written on first use (random weights whose target favours a few tokens, so the
# drafter is partly accepted; a trained pair replaces it with the embedded-pair issue).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PAIR=${PAIR:-.tiny}
PORT=${PORT:-30000}
[ -f "$PAIR/draft/config.json" ] || "$PY" -m dflash_sglang.testing.tiny --out "$PAIR" --block-size 16 --hot-tokens 3

exec "$PY" -m sglang.launch_server \
    --model-path "$PAIR/target" \
    --speculative-algorithm DFLASH \
    --speculative-draft-model-path "$PAIR/draft" \
    --speculative-num-draft-tokens 16 \
    --device cpu \
    --dtype float32 \
    --attention-backend torch_native \
    --max-total-tokens 8192 \
    --sleep-on-idle \
    --host 127.0.0.1 \
    --port "$PORT" \
    "$@"
