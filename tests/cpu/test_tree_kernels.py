"""For the same draft trees, what we give SGLang's GPU tree path equals what its own kernels build
and compute: SGLang's Triton kernels run on CPU by Triton's interpreter in a subprocess
(sglang_tree_kernels_probe.py), against tree/batch.py's layout and the CPU stand-ins (cpu/causal_conv1d.py,
cpu/gdn.py) that the CPU servers run.

- EAGLE's tree builder: our FULL_MASK (the GPU backends' layout) and QLEN_ONLY masks, positions and
  first-child / next-sibling links equal the builder's for an EAGLE draft of depth 4, topk 4;
- tree verify in a hybrid target's recurrent layers, on a DDTree: the conv kernel's outputs, saved
  windows and derived parents, and the GDN kernel's outputs and per-node states, equal ours.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXACT = 1e-5  # float32: the kernels sum in another order


@pytest.fixture(scope="module")
def report():
    probe = Path(__file__).with_name("sglang_tree_kernels_probe.py")
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_our_masks_positions_and_links_equal_sglangs_eagle_tree_builder(report):
    for key in ("FULL_MASK mask", "QLEN_ONLY mask", "positions", "next_token", "next_sibling"):
        assert report[f"builder {key} equal"], key
    assert report["builder tree depth"] == 4 and report["builder nodes with a later sibling"] > 0


def test_the_conv_follows_each_nodes_root_path_as_sglangs_kernel(report):
    assert report["conv parents equal"] and report["conv parents are the tree's"]
    for key in ("out", "windows", "live state"):
        assert report[f"conv {key} max diff"] < EXACT, key


def test_the_gdn_state_follows_each_nodes_parent_as_sglangs_kernel(report):
    assert report["gdn out max diff"] < EXACT and report["gdn states max diff"] < EXACT
    assert report["gdn live state untouched"]
