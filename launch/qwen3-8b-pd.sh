#!/usr/bin/env bash
# Qwen3-8B with z-lab/Qwen3-8B-DFlash-b16, prefill-decode disaggregated on one 2-GPU node: a
# prefill server on GPU 0, a decode server on GPU 1, SGLang's router in front (port 30000). The
# prefill's draft KV travels with the target KV (docs/parallel.md). Over RDMA set IB_DEVICE (e.g.
# mlx5_0); without it Mooncake runs over TCP. The same deployment runs on CPU in tests/server/test_pd.py.
set -euo pipefail
TARGET=${TARGET:-Qwen/Qwen3-8B}
DRAFT=${DRAFT:-z-lab/Qwen3-8B-DFlash-b16}
BOOTSTRAP_PORT=${BOOTSTRAP_PORT:-8998}
IB=${IB_DEVICE:+--disaggregation-ib-device $IB_DEVICE}
[ -n "${IB_DEVICE:-}" ] || export MOONCAKE_PROTOCOL=tcp MC_FORCE_TCP=1
common=(--model-path "$TARGET" --speculative-algorithm DFLASH --speculative-draft-model-path "$DRAFT"
        --speculative-num-draft-tokens 16 --attention-backend fa3 --mem-fraction-static 0.75
        --disaggregation-transfer-backend mooncake $IB)
python -m sglang.launch_server "${common[@]}" --port 30001 --base-gpu-id 0 \
    --disaggregation-mode prefill --disaggregation-bootstrap-port "$BOOTSTRAP_PORT" &
python -m sglang.launch_server "${common[@]}" --port 30002 --base-gpu-id 1 --disaggregation-mode decode &
python -m sglang_router.launch_router --pd-disaggregation --port 30000 \
    --prefill http://127.0.0.1:30001 "$BOOTSTRAP_PORT" --decode http://127.0.0.1:30002 &
trap 'kill 0' EXIT INT TERM
wait
