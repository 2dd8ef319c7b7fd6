#!/usr/bin/env bash
# DFLASH on CPU with the embedded tiny HYBRID pair: a Qwen3.5-style target (3 Gated DeltaNet
# linear attention layers and 1 full attention layer) and its drafter, trained on CPU and shipped
# in the package (make tiny-hybrid-pair regenerates them). launch/tiny-cpu.sh with this pair, plus what a
# hybrid target needs on CPU, as the hybrid server tests run it (tests/server/hybrid.py):
# - SGLANG_MAMBA_CONV_DTYPE=float32: the conv state in float32 (SGLang keeps it in bfloat16
#   otherwise), so greedy text matches a float32 no-spec server and transformers;
# - --max-mamba-cache-size: a bounded state pool (the default sizes it from the machine's memory);
# - the plain worker (no SGLANG_ENABLE_SPEC_V2) under the synchronous schedule, with the no_buffer
#   mamba radix cache; the overlap worker takes extra_buffer instead:
#   SGLANG_ENABLE_SPEC_V2=1 MAMBA_ARGS="--mamba-radix-cache-strategy extra_buffer --mamba-track-interval 64"
# `make demo` against it starts its no-spec server with the same flags and environment.
set -euo pipefail
cd "$(dirname "$0")/.."
MAMBA_CACHE=${MAMBA_CACHE:-64}
MAMBA_ARGS=${MAMBA_ARGS:---mamba-radix-cache-strategy no_buffer --disable-overlap-schedule}
export SGLANG_MAMBA_CONV_DTYPE=${SGLANG_MAMBA_CONV_DTYPE:-float32}
export PAIR=${PAIR:-python/dflash_sglang/assets/tiny-hybrid-pair}

# shellcheck disable=SC2086  # MAMBA_ARGS is a list of flags
exec launch/tiny-cpu.sh --max-mamba-cache-size "$MAMBA_CACHE" $MAMBA_ARGS "$@"
