"""The tree verify's Triton kernel (cpu/gated_deltanet/tree_replay_triton.py) against its torch
stand-in (tree_replay.py), run by Triton's interpreter on CPU (`TRITON_INTERPRET=1`, set by
test_gdn_tree_replay.py before Triton loads), on tree_replay_cases.py's cases: V in one tile, or in two
in the float32 mixed batch (the interpreter runs every program in turn: this keeps it near 30 s).

Prints a JSON report as the last stdout line: per case, the max absolute differences of the outputs,
the rings (d and k as high + low parts, g; whole rings, so a stray write shows) and the seconds the
kernel took.
"""

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root
from dflash_sglang.cpu.gated_deltanet.tree_replay import gdn_tree_replay_verify  # noqa: E402
from dflash_sglang.cpu.gated_deltanet.tree_replay_triton import gdn_tree_replay_verify_triton  # noqa: E402
from tests.cpu.tree_replay_cases import CASES, build, copy_args  # noqa: E402


def high_low(args, high, low):
    return args[high].double() + (0 if args[low] is None else args[low].double())


def max_diff(x, y):
    return float((x.double() - y.double()).abs().max())


def compare(requests, L, dtype, block_v):
    ours = build(requests, L, dtype)
    twin = copy_args(ours)
    gdn_tree_replay_verify(**ours)
    start = time.perf_counter()
    gdn_tree_replay_verify_triton(**twin, block_v=block_v)
    seconds = time.perf_counter() - start
    return {
        "out": max_diff(ours["out"], twin["out"]),
        "out max abs": float(ours["out"].abs().max()),
        "out nan": bool(twin["out"].isnan().any()),
        "d": max_diff(high_low(ours, "d_cache", "rawv_cache"), high_low(twin, "d_cache", "rawv_cache")),
        "k": max_diff(high_low(ours, "k_cache", "rawk_cache"), high_low(twin, "k_cache", "rawk_cache")),
        "g": max_diff(ours["g_cache"], twin["g_cache"]),
        "checkpoint equal": torch.equal(ours["checkpoint_state"], twin["checkpoint_state"]),
        "seconds": round(seconds, 2),
    }


if __name__ == "__main__":
    tiles = {name: 16 if name == "mixed" else 32 for name in CASES}
    print(json.dumps({name: compare(*case, tiles[name]) for name, case in CASES.items()}))
