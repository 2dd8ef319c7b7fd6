#!/usr/bin/env bash
# DFLASH on CPU with the embedded tiny pair: the seed card's command, with CPU flags and the
# trained tiny models shipped in the package (make tiny-pair regenerates them). The drafter is
# trained at block sizes 4, 8 and 16; BLOCK=4 or BLOCK=16 serve it too.
# Why these settings (docs/benchmarks.md, "The demo"): on the cards' request block 8 with the
# adaptive width (the default on CPU) gave 2.06-2.48x no-spec over five `make demo` runs; the
# whole block every step (DFLASH_SGLANG_ADAPTIVE_WIDTH=0) 1.94x and block 16 2.11x in one run
# each, within the runs' spread, so block 8 stays (the cards' 16 is BLOCK=16). The plain worker:
# SGLANG_ENABLE_SPEC_V2=1 was level with it on CPU (1.04x at concurrency 1 in `make bench`), and
# the seed cards leave that switch commented out.
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
