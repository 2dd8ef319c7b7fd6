"""Batches of draft trees through a ReplaySSM ring, and a float64 reference, shared by
test_gdn_tree_replay.py and tree_replay_triton_probe.py.

A case is a ring length, an activation dtype and requests, each a tree (parent pointers, node 0 the
root) with the ring's write cursor wp (records already in the ring), or a dead request (mamba slot
0, the null block). Every ring lane starts random, so a write anywhere it should not shows.
"""

import math
import random

import torch

HEADS, HEADS_V, DIM_K, DIM_V, SLOTS, RING_ROWS = 2, 4, 16, 32, 10, 10
DEAD = "dead"


def chain(nodes):
    return [-1] + list(range(nodes - 1))


def star(nodes):
    return [-1] + [0] * (nodes - 1)


def random_tree(nodes, depth, seed):
    """Parent pointers in topological order whose longest root path has exactly `depth` nodes:
    a spine of depth nodes at random positions, every other node under a random shallower one."""
    rng = random.Random(seed)
    spine = sorted(rng.sample(range(1, nodes), depth - 1))
    parents, depths, last = [-1], [1], 0
    for t in range(1, nodes):
        if t in spine:
            parent, last = last, t
        else:
            parent = rng.choice([s for s in range(t) if depths[s] < depth])
        parents.append(parent)
        depths.append(depths[parent] + 1)
    return parents


def tree_depth(parents):
    depths = []
    for p in parents:
        depths.append(1 if p < 0 else depths[p] + 1)
    return max(depths)


MIXED = [
    (random_tree(5, 3, 1), 1), (DEAD, 4), (random_tree(23, 7, 2), 0), (random_tree(64, 16, 3), 6),
    (chain(1), 2), (chain(12), 25), (star(9), 4),
]  # fmt: skip
CASES = {  # name: (requests as (parents or DEAD, wp or dead's node count), L, dtype)
    "one node": ([(chain(1), 0), (chain(1), 5)], 16, torch.float32),
    "chain 16": ([(chain(16), 3)], 32, torch.float32),
    "star 16": ([(star(16), 2)], 32, torch.float32),
    "tree 64 depth 16": ([(random_tree(64, 16, 0), 0)], 64, torch.float32),
    "mixed": (MIXED, 32, torch.float32),
    "mixed bf16": (MIXED, 32, torch.bfloat16),
}


def build(requests, L, dtype=torch.float32, seed=0, rows=None):
    """The verify's keyword arguments for `requests` (see CASES). Live request i gets mamba slot
    i + 1 and a ring row of its own (random, or `rows`); the dead one slot 0 and a row too (random,
    or `rows`'s, which may be -1, a padding row)."""
    gen = torch.Generator().manual_seed(seed)
    counts = [n if tree == DEAD else len(tree) for tree, n in requests]
    total = sum(counts)
    picked = torch.randperm(RING_ROWS, generator=gen)[: len(requests)].int()
    rows = picked if rows is None else torch.tensor(rows, dtype=torch.int32)
    slots = torch.tensor([0 if tree == DEAD else i + 1 for i, (tree, _) in enumerate(requests)])
    write_pos = torch.randint(0, L, (RING_ROWS,), generator=gen, dtype=torch.int32)
    for row, (tree, wp) in zip(rows.tolist(), requests, strict=True):
        if row >= 0:
            write_pos[row] = 0 if tree == DEAD else wp
    parents = [p for (tree, n) in requests for p in (chain(n) if tree == DEAD else tree)]
    keys = torch.randn(RING_ROWS, HEADS, L, DIM_K, generator=gen)
    args = dict(
        q=torch.randn(total, HEADS, DIM_K, generator=gen).to(dtype),
        k=torch.randn(total, HEADS, DIM_K, generator=gen).to(dtype),
        v=torch.randn(total, HEADS_V, DIM_V, generator=gen).to(dtype),
        a=torch.randn(total, HEADS_V, generator=gen).to(dtype),
        b=torch.randn(total, HEADS_V, generator=gen).to(dtype),
        A_log=torch.randn(HEADS_V, generator=gen) * 0.5, dt_bias=torch.randn(HEADS_V, generator=gen),
        checkpoint_state=torch.randn(SLOTS, HEADS_V, DIM_V, DIM_K, generator=gen) * 0.3,
        d_cache=(torch.randn(RING_ROWS, HEADS_V, L, DIM_V, generator=gen) * 0.3).to(dtype),
        k_cache=(keys / keys.norm(dim=-1, keepdim=True)).to(dtype),
        g_cache=-torch.rand(RING_ROWS, HEADS_V, L, generator=gen) * 0.3,
        rawv_cache=None, rawk_cache=None,
        out=torch.full((total, HEADS_V, DIM_V), float("nan"), dtype=dtype),
        query_start_loc=torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32),
        ssm_state_indices=slots.int(), replay_indices=rows, write_pos=write_pos,
        cache_base=torch.randint(0, L, (RING_ROWS,), generator=gen, dtype=torch.int32),
        parents=torch.tensor(parents, dtype=torch.int32), scale=None, use_qk_l2norm_in_kernel=True,
        null_block_id=0,
    )  # fmt: skip
    if dtype != torch.float32:  # 16-bit rings keep low parts
        args["rawv_cache"] = torch.randn(args["d_cache"].shape, generator=gen).to(dtype) * 1e-3
        args["rawk_cache"] = torch.randn(args["k_cache"].shape, generator=gen).to(dtype) * 1e-3
    return args


def copy_args(args):
    return {name: x.clone() if isinstance(x, torch.Tensor) else x for name, x in args.items()}


def reference(args, i):
    """float64, node by node from the parent's state, for request i: (outputs [n, HV, V], the state
    after every node [n, HV, V, K], update vectors d [n, HV, V], normalised keys [n, H, K],
    log-decays g [n, HV]). The start state is the checkpoint with the ring's records
    [base, base + wp) replayed in order (high parts, as the verify reads them)."""
    start, end = args["query_start_loc"][i : i + 2].tolist()
    row, slot = int(args["replay_indices"][i]), int(args["ssm_state_indices"][i])
    L, group = args["d_cache"].shape[2], HEADS_V // HEADS
    base, wp = int(args["cache_base"][row]), int(args["write_pos"][row])
    S0 = args["checkpoint_state"][slot].double().clone()
    for t in range(wp):
        at = (base + t) % L
        for h in range(HEADS_V):
            S0[h] = math.exp(args["g_cache"][row, h, at]) * S0[h] + torch.outer(
                args["d_cache"][row, h, at].double(), args["k_cache"][row, h // group, at].double()
            )

    def unit(x):
        x = x.double()
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    q, k = unit(args["q"][start:end]), unit(args["k"][start:end])
    v = args["v"][start:end].double()
    x = args["a"][start:end].double() + args["dt_bias"].double()
    g = -args["A_log"].double().exp() * torch.where(x <= 20, torch.log1p(x.exp()), x)
    beta = torch.sigmoid(args["b"][start:end].double())
    scale = DIM_K**-0.5 if args["scale"] is None else args["scale"]
    parents = args["parents"][start:end].tolist()
    states = torch.zeros(end - start, *S0.shape, dtype=torch.float64)
    outs, d = torch.zeros(v.shape, dtype=torch.float64), torch.zeros(v.shape, dtype=torch.float64)
    for t, parent in enumerate(parents):
        S = (S0 if parent < 0 else states[parent]) * g[t].exp()[:, None, None]
        kt = k[t].repeat_interleave(group, dim=0)
        d[t] = beta[t, :, None] * (v[t] - torch.einsum("hvk,hk->hv", S, kt))
        states[t] = S + d[t][..., None] * kt[:, None, :]
        outs[t] = torch.einsum("hvk,hk->hv", states[t], q[t].repeat_interleave(group, dim=0)) * scale
    return outs, states, d, k, g


def written_lanes(args, i):
    """{node: lane} of request i's records: lane (base + wp + node) % L where wp + node < L."""
    start, end = args["query_start_loc"][i : i + 2].tolist()
    row, L = int(args["replay_indices"][i]), args["d_cache"].shape[2]
    base, wp = int(args["cache_base"][row]), int(args["write_pos"][row])
    return {t: (base + wp + t) % L for t in range(end - start) if wp + t < L}
