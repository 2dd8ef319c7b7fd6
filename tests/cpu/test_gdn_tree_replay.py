"""A draft tree's GDN verify through a ReplaySSM ring (cpu/gated_deltanet/tree_replay.py) and its
Triton twin (tree_replay_triton.py), against

- a float64 reference written here (tree_replay_cases.py): every node's state from its parent's,
  the start state the checkpoint with the ring's pending records replayed. Trees of 1 to 64 nodes
  and depths 1 to 16 (random, a chain, a star), several trees in one batch with a dead request,
  records already in the ring (wp > 0), float32 and bfloat16 activations. Each node's record
  (d, normalised k, g) lands at lane (base + wp + node) % L while wp + node < L, and nothing else
  in the ring, the checkpoint or the cursors changes;
- the chain stand-in (replayssm.py, launch_mode "verify"): a chain tree gives its outputs and records;
- the chain commit: after compact_accepted_path, SGLang's cursor advance and fold (their CPU
  stand-ins) leave the checkpoint at the reference's state of the accepted node;
- the Triton kernel run by Triton's interpreter on CPU (tree_replay_triton_probe.py, a subprocess
  with TRITON_INTERPRET=1) on the same cases, and compiled for an H200 (sm_90) without one.

bfloat16 tolerances: the math is float32, but the output is stored in bfloat16, whose rounding moves
a value by up to 2^-8 of its size, so outputs are checked to 2^-8 relative (two roundings of nearly
equal float32 values, the kernel's and the stand-in's, differ by up to an ulp, 2^-7); the records'
high + low parts carry about 16 bits, so d and k are checked to 1e-4 (2e-4 between the twins).
"""

import random
from pathlib import Path

import pytest
import torch

from dflash_sglang.cpu.gated_deltanet.replayssm import (
    commit_gdn_replayssm_circular_on_cpu,
    commit_gdn_replayssm_spec_on_cpu,
    gdn_replayssm_spec_decode_on_cpu,
)
from dflash_sglang.cpu.gated_deltanet.replayssm_math import fold_records, per_value_head
from dflash_sglang.cpu.gated_deltanet.tree_replay import compact_accepted_path, gdn_tree_replay_verify
from tests.cpu.tree_replay_cases import (
    CASES,
    DEAD,
    HEADS_V,
    RING_ROWS,
    build,
    chain,
    copy_args,
    random_tree,
    reference,
    star,
    tree_depth,
    written_lanes,
)
from tests.interpreter_probe import run_probe

RINGS = ("d_cache", "k_cache", "g_cache", "rawv_cache", "rawk_cache")


def high_low(args, name, low):
    return args[name].double() + (0 if args[low] is None else args[low].double())


def check_against_reference(requests, L, dtype, seed=0):
    args = build(requests, L, dtype, seed)
    before = copy_args(args)
    gdn_tree_replay_verify(**args)
    bf16 = dtype != torch.float32
    for name in ("checkpoint_state", "write_pos", "cache_base"):
        assert torch.equal(args[name], before[name]), name
    for i, (tree, _) in enumerate(requests):
        start, end = args["query_start_loc"][i : i + 2].tolist()
        row = int(args["replay_indices"][i])
        lanes = written_lanes(args, i)
        if tree == DEAD:
            assert (args["out"][start:end] == 0).all()
            lanes = {}
        else:
            outs, _, d, k, g = reference(args, i)
            error = (args["out"][start:end].double() - outs).abs()
            assert (error <= (2**-8 if bf16 else 0) * outs.abs() + 1e-6).all(), float(error.max())
            nodes, at = list(lanes), list(lanes.values())
            ring_d = high_low(args, "d_cache", "rawv_cache")[row][:, at].transpose(0, 1)
            ring_k = high_low(args, "k_cache", "rawk_cache")[row][:, at].transpose(0, 1)
            assert torch.allclose(ring_d, d[nodes], atol=1e-4 if bf16 else 2e-6)
            assert torch.allclose(ring_k, k[nodes], atol=1e-4 if bf16 else 1e-6)
            assert torch.allclose(args["g_cache"][row][:, at].T.double(), g[nodes], atol=5e-6)
        untouched = [lane for lane in range(L) if lane not in set(lanes.values())]
        for name in RINGS:
            if args[name] is not None:
                assert torch.equal(args[name][row][:, untouched], before[name][row][:, untouched]), name
    return args


@pytest.mark.parametrize("name", CASES)
def test_the_tree_verify_follows_the_float64_recurrence(name):
    requests, L, dtype = CASES[name]
    check_against_reference(requests, L, dtype)


@pytest.mark.parametrize("seed", range(4))
def test_random_trees_of_1_to_64_nodes_and_depths_1_to_16(seed):
    rng = random.Random(seed)
    sizes = [
        (n, rng.randint(min(2, n), min(16, n))) for n in [1, 64, *(rng.randint(2, 64) for _ in range(4))]
    ]
    requests = [
        (random_tree(n, depth, seed * 10 + j), rng.randint(0, 6)) for j, (n, depth) in enumerate(sizes)
    ]
    assert [tree_depth(tree) for tree, _ in requests] == [depth for _, depth in sizes]
    check_against_reference(requests + [(DEAD, 3)], 64, torch.float32, seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_chain_tree_is_the_chain_verify(dtype):
    requests = [(chain(4), 3), (chain(8), 0), (DEAD, 2), (chain(1), 7), (chain(6), 12)]
    tree = build(requests, 16, dtype, seed=5)
    flat = copy_args(tree)
    gdn_tree_replay_verify(**tree)
    flat.pop("parents")
    gdn_replayssm_spec_decode_on_cpu(
        None, **flat, beta_cache=None, is_flush=torch.zeros(len(flat["write_pos"]), dtype=torch.int8),
        max_cache_len=16, max_spec_len=8, launch_mode="verify",
    )  # fmt: skip
    out_error = (tree["out"].double() - flat["out"].double()).abs()
    assert (out_error <= (2**-7 if dtype != torch.float32 else 0) * flat["out"].double().abs() + 2e-6).all()
    for high, low in (("d_cache", "rawv_cache"), ("k_cache", "rawk_cache")):
        assert torch.allclose(high_low(tree, high, low), high_low(flat, high, low), atol=2e-6)
    assert torch.allclose(tree["g_cache"], flat["g_cache"], atol=1e-7)


def accepted_paths(requests, seed):
    """A root-to-node path per request (a random node's ancestors), -1 padded; dead: all -1."""
    rng, paths = random.Random(seed), []
    for tree, _ in requests:
        path = []
        if tree != DEAD:
            node = rng.choice(range(len(tree)))
            while node >= 0:
                path.insert(0, node)
                node = tree[node]
        paths.append(path)
    depth = max(map(len, paths))
    return torch.tensor([path + [-1] * (depth - len(path)) for path in paths])


def folded_lanes(checkpoint, ring, row, base, count):
    """fold_records of a ring row's lanes [base, base + count), high + low parts, onto `checkpoint`."""
    lanes = (base + torch.arange(ring["d_cache"].shape[-2])) % ring["d_cache"].shape[-2]
    d, k = (
        high_low(ring, high, low)[row][:, lanes]
        for high, low in (("d_cache", "rawv_cache"), ("k_cache", "rawk_cache"))
    )
    keys = per_value_head(k.transpose(0, 1), HEADS_V).transpose(0, 1)
    records = (d[None].float(), keys[None].float(), ring["g_cache"][row][:, lanes][None])
    return fold_records(checkpoint[None], *records, torch.tensor([count]))[0].double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compacted_path_commits_as_a_chain(dtype):
    """Two layers share the trees, rows and cursors; after the verify, compact_accepted_path then
    SGLang's chain commit (cursor advance, fold every commit) leave each checkpoint at the
    reference's state of the accepted node, and lanes [base, base + wp + accepted) folded onto the
    checkpoint give it too. The dead request's row is -1 (a padding row), which indexes the last row
    as a live request's."""
    requests = [(random_tree(20, 6, 7), 3), (DEAD, 5), (random_tree(40, 16, 8), 9), (chain(5), 0)]
    requests += [(random_tree(30, 4, 9), 1), (star(12), 2)]
    rows = [RING_ROWS - 1, -1, 3, 0, 5, 7]
    L, layers = 64, [build(requests, 64, dtype, seed=s, rows=rows) for s in (11, 12)]
    for name in ("replay_indices", "write_pos", "cache_base"):
        layers[1][name] = layers[0][name]
    for layer in layers:  # the verify reads the history's high parts only, the fold adds the low
        for low in ("rawv_cache", "rawk_cache"):  # parts: none in the history, one start state
            if layer[low] is not None:
                layer[low].zero_()
        gdn_tree_replay_verify(**layer)
    accepted = accepted_paths(requests, seed=3)
    counts, rows = (accepted >= 0).sum(1), layers[0]["replay_indices"]
    write_pos, cache_base = layers[0]["write_pos"], layers[0]["cache_base"]
    names = [name for name in RINGS if layers[0][name] is not None]
    rings = {name: torch.stack([layer[name] for layer in layers]) for name in names}
    before = {name: ring.clone() for name, ring in rings.items()}
    compact_accepted_path(list(rings.values()), rows, write_pos, cache_base, accepted, null_block_id=-1)
    compacted = [{**layer, **{name: rings[name][n] for name in names}} for n, layer in enumerate(layers)]
    expected = {}
    for i, (tree, _) in enumerate(requests):
        row, wp, base = int(rows[i]), int(write_pos[rows[i]]), int(cache_base[rows[i]])
        if row < 0:
            continue
        moved = {(base + wp + j) % L for j in range(int(counts[i]))}
        still = [lane for lane in range(L) if lane not in moved]
        for name in names:
            assert torch.equal(rings[name][:, row][:, :, still], before[name][:, row][:, :, still]), name
        if tree == DEAD:
            continue
        for n, layer in enumerate(compacted):
            leaf = reference(layers[n], i)[1][int(accepted[i, counts[i] - 1])]
            slot = int(layer["ssm_state_indices"][i])
            folded = folded_lanes(layer["checkpoint_state"][slot], layer, row, base, wp + int(counts[i]))
            assert torch.allclose(folded, leaf, atol=1e-4), float((folded - leaf).abs().max())
            expected[n, slot] = leaf
    is_flush = torch.zeros(len(write_pos), dtype=torch.int8)
    commit_gdn_replayssm_spec_on_cpu(None, write_pos, cache_base, is_flush, counts.int(), rows, L, 64,
                                     fold_every_commit=True, null_block_id=-1)  # fmt: skip
    checkpoints = torch.stack([layer["checkpoint_state"] for layer in layers])
    commit_gdn_replayssm_circular_on_cpu(
        None, checkpoint_state=checkpoints, d_cache=rings["d_cache"], k_cache=rings["k_cache"],
        g_cache=rings["g_cache"], d_residual_cache=rings.get("rawv_cache"),
        k_residual_cache=rings.get("rawk_cache"), state_batch_indices=layers[0]["ssm_state_indices"],
        replay_indices=rows, write_pos=write_pos, cache_base=cache_base, is_flush=is_flush,
        accept_lens=counts.int(), null_block_id=0,
    )  # fmt: skip
    for (n, slot), leaf in expected.items():
        assert torch.allclose(checkpoints[n, slot].double(), leaf, atol=1e-4)
    assert torch.equal(checkpoints[:, 0], torch.stack([layer["checkpoint_state"][0] for layer in layers]))


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("tree_replay_triton_probe.py"))


@pytest.mark.parametrize("name", CASES)
def test_the_triton_kernel_run_by_the_interpreter_equals_the_stand_in(report, name):
    r = report[name]
    assert r["checkpoint equal"] and not r["out nan"], r
    if CASES[name][2] == torch.float32:
        assert r["out"] < 1e-6 and r["d"] < 2e-6 and r["k"] < 1e-6 and r["g"] < 2e-6, r
    else:
        assert r["out"] <= 2**-7 * r["out max abs"] and r["d"] < 2e-4 and r["k"] < 1e-4 and r["g"] < 2e-6, r


def test_the_triton_kernel_compiles_for_an_h200():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from dflash_sglang.cpu.gated_deltanet import tree_replay_triton as kernel

    signature = {name: "*bf16" for name in ("q", "k", "v", "a", "b", "d_cache", "k_cache", "rawv_cache")}
    signature |= {name: "*bf16" for name in ("rawk_cache", "out")}
    signature |= {name: "*fp32" for name in ("A_log", "dt_bias", "h0", "g_cache", "scratch")}
    cursors = ("query_start_loc", "ssm_state_indices", "replay_indices", "write_pos", "cache_base", "parents")
    signature |= {name: "*i32" for name in cursors} | {"scale": "fp32"}
    constants = dict(
        H=16, HV=32, K=128, V=128, BV=64, BC=16, L=16, NORM=True, LOW_PARTS=True, NULL_BLOCK_ID=0
    )
    signature |= dict.fromkeys(constants, "constexpr")
    source = ASTSource(kernel._tree_replay_kernel, signature, constexprs=constants)
    assert triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"]


def test_compaction_moves_only_written_records_and_wraps_the_ring():
    """L 8, base 6, wp 1: path [0, 2, 3, 7] moves lanes 7 -> 7, 1 -> 0, 2 -> 1 (wrapping); node 7's
    record was never written (wp + 7 >= L), so lane 2 keeps its own. A padding row (-1) and an
    all -1 path move nothing; nor does a batch where nothing moves."""
    ring = torch.arange(3 * 2 * 8 * 4, dtype=torch.float32).view(1, 3, 2, 8, 4)  # [layers, R, heads, L, dim]
    gates = torch.arange(3 * 2 * 8, dtype=torch.float32).view(1, 3, 2, 8)
    before = [ring.clone(), gates.clone()]
    write_pos, cache_base = torch.tensor([1, 0, 3]), torch.tensor([6, 0, 2])
    paths = torch.tensor([[0, 2, 3, 7], [0, 1, -1, -1], [-1, -1, -1, -1]])
    compact_accepted_path([ring, gates], torch.tensor([0, -1, 2]), write_pos, cache_base, paths, -1)
    lanes = [1, 2, 2, 3, 4, 5, 6, 7]  # new lane l <- old lanes[l]: 0 <- 1, 1 <- 2, the rest their own
    assert torch.equal(ring[:, 0], before[0][:, 0][:, :, lanes])
    assert torch.equal(gates[:, 0], before[1][:, 0][:, :, lanes])
    assert torch.equal(ring[:, 1:], before[0][:, 1:]) and torch.equal(gates[:, 1:], before[1][:, 1:])
    compact_accepted_path([ring], torch.tensor([-1, 2]), write_pos, cache_base, paths[1:], -1)
    assert torch.equal(ring[:, 1:], before[0][:, 1:])
