"""For the same draft trees, what we give SGLang's GPU tree path equals what its own kernels build
and compute: SGLang's Triton kernels run on CPU by Triton's interpreter in a subprocess
(sglang_tree_kernels_probe.py), against tree/batch.py's layout and the CPU stand-ins
(cpu/gated_deltanet/causal_conv1d.py, cpu/gated_deltanet/chunk_and_decode.py) that the CPU servers run.

- EAGLE's tree builder: our FULL_MASK (the GPU backends' layout) and QLEN_ONLY masks, positions and
  first-child / next-sibling links equal the builder's for an EAGLE draft of depth 4, topk 4;
- tree verify in a hybrid target's recurrent layers, on a DDTree: the conv kernel's outputs, saved
  windows and derived parents, and the GDN kernel's outputs and per-node states, equal ours.
"""

from pathlib import Path

import pytest

from tests.interpreter_probe import run_probe

EXACT = 1e-5  # float32: the kernels sum in another order


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("sglang_tree_kernels_probe.py"))


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
