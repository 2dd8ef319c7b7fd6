#!/usr/bin/env bash
# `make serve`: DFLASH on CPU with the embedded seed-shaped hybrid pair
# (python/dflash_sglang/assets/seed-hybrid-pair, `make seed-hybrid-pair` regenerates it): a 16-layer
# Qwen3.5-style target (Gated DeltaNet, full attention every fourth layer) and a one-layer DFlash
# drafter reading five of its layers, the shape of the seed models' pairs, at the seed cards' block
# 16. The flags are launch/tiny-hybrid-cpu.sh's (float32 conv state, a bounded mamba pool, the
# plain worker with the no_buffer radix cache); `make demo` starts its no-spec server with the same.
set -euo pipefail
cd "$(dirname "$0")/.."
export PAIR=${PAIR:-python/dflash_sglang/assets/seed-hybrid-pair}
export BLOCK=${BLOCK:-16}
exec launch/tiny-hybrid-cpu.sh "$@"
