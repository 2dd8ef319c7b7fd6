"""SGLang's own Triton kernels for EAGLE tree verify, run by Triton's interpreter on CPU
(`TRITON_INTERPRET=1`, set by test_tree_kernels.py before Triton loads), against ours for the same
trees:

- the EAGLE tree builder (`spec_tree.sgl_build_tree_kernel_triton`) in FULL_MASK and QLEN_ONLY
  modes: the mask, positions and first-child / next-sibling links of a random EAGLE draft, against
  BatchTree's (tree/batch.py) for the same tree;
- the causal conv1d update with tree links (`causal_conv1d_update`): outputs, saved windows and the
  parent pointers it derives, against cpu/gated_deltanet/causal_conv1d.py;
- the GDN recurrent verify with parent pointers (`fused_sigmoid_gating_delta_rule_update`): outputs
  and the state after every node, against cpu/gated_deltanet/chunk_and_decode.py.

Prints a JSON report as the last stdout line.
"""

import json

import torch

torch.manual_seed(0)


def eagle_draft(bs: int, topk: int, steps: int, num_verify: int):
    """A random EAGLE draft in SGLang's layout (organize_draft_results): scores accumulate down
    the beams, so the selected candidates form a tree. Returns (parent_list, top_scores_index)."""
    from sglang.srt.speculative.eagle_utils import organize_draft_results

    scores = [torch.rand(bs, 1, topk).log()]
    tokens = [torch.randint(0, 100, (bs, topk))]
    parents = [torch.arange(-1, topk).expand(bs, -1)]
    beam_scores = scores[0][:, 0]  # [bs, topk]: the current beams' scores
    for step in range(1, steps):
        expanded = beam_scores.unsqueeze(-1) + torch.rand(bs, topk, topk).log()  # [bs, beam, child]
        scores.append(expanded)
        tokens.append(torch.randint(0, 100, (bs, topk * topk)))
        best = expanded.flatten(1).topk(topk, dim=-1)
        beam_scores = best.values
        # The next step's beams: this step's chosen candidates, by index in the whole list.
        parents.append(best.indices + topk * topk * (step - 1) + topk)
    parent_list, top_scores_index, _ = organize_draft_results(scores, tokens, parents, num_verify)
    return parent_list, top_scores_index


def eagle_parents(parent_list, selected, topk: int) -> torch.Tensor:
    """[bs, N] each node's parent node from the EAGLE layout, read the way its kernel reads it."""
    bs, n = selected.shape[0], selected.shape[1] + 1
    parents = torch.full((bs, n), -1, dtype=torch.int64)
    for b in range(bs):
        where = {int(c): i + 1 for i, c in enumerate(selected[b])}
        for i in range(1, n):
            slot = int(selected[b, i - 1]) // topk
            parents[b, i] = 0 if slot == 0 else where[int(parent_list[b, slot])]
    return parents


def batch_tree(parents: torch.Tensor):
    from dflash_sglang.tree.batch import BatchTree

    depths = torch.zeros_like(parents)
    for i in range(1, parents.shape[1]):
        depths[:, i] = depths.gather(1, parents[:, i : i + 1]).squeeze(1) + 1
    tokens = torch.arange(parents.numel()).view(parents.shape)
    return BatchTree(tokens, parents, depths, int(depths.max()), parents.shape[1])


def check_builder(report):
    from sglang.kernels.ops.speculative.spec_tree import TreeMaskMode, sgl_build_tree_kernel_triton

    bs, topk, steps, n = 3, 4, 4, 12
    parent_list, selected = eagle_draft(bs, topk, steps, n)
    seq_lens = torch.tensor([5, 9, 2])
    tree = batch_tree(eagle_parents(parent_list, selected, topk))
    for mode in (TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY):
        size = int(seq_lens.sum()) * n + n * n * bs if mode == TreeMaskMode.FULL_MASK else n * n * bs
        mask = torch.ones(size, dtype=torch.bool)
        positions = torch.empty(bs * n, dtype=torch.int64)
        index, next_token, next_sibling = torch.full((3, bs, n), -1, dtype=torch.int64)
        sgl_build_tree_kernel_triton(
            parent_list, selected, seq_lens, mask, positions, index, next_token, next_sibling,
            topk, steps, n, mode,
        )  # fmt: skip
        ours = tree.full_mask(seq_lens, int(seq_lens.sum())) if mode == TreeMaskMode.FULL_MASK else (
            tree.ancestor_mask().flatten()
        )  # fmt: skip
        report[f"builder {mode.name} mask equal"] = bool(torch.equal(mask, ours))
    our_next_token, our_next_sibling = tree.retrieve_arrays()
    report["builder positions equal"] = bool(torch.equal(positions, tree.positions(seq_lens).flatten()))
    report["builder next_token equal"] = bool(torch.equal(next_token, our_next_token))
    report["builder next_sibling equal"] = bool(torch.equal(next_sibling, our_next_sibling))
    report["builder tree depth"] = int(tree.depths.max())
    report["builder nodes with a later sibling"] = int((next_sibling >= 0).sum())


def random_tree(bs: int, n: int):
    """A DDTree from random drafter log-probabilities (tree/batch.py), as a step builds it."""
    from dflash_sglang.tree.batch import build_batch_trees

    logprobs = torch.log_softmax(torch.randn(bs, 7, 50) * 2, dim=-1)
    return build_batch_trees(torch.randint(0, 50, (bs,)), logprobs, n - 1, 3)


def check_conv(report):
    from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update

    from dflash_sglang.cpu.gated_deltanet.causal_conv1d import causal_conv1d_update_on_cpu

    bs, n, dim, width, slots = 3, 12, 16, 4, 5
    tree = random_tree(bs, n)
    next_token, next_sibling = tree.retrieve_arrays()
    x = torch.randn(bs, dim, n)
    weight, bias = torch.randn(dim, width), torch.randn(dim)
    results = []
    for kernel in ("sglang", "ours"):
        states = torch.randn(slots, dim, width - 1, generator=torch.Generator().manual_seed(1))
        windows = torch.zeros(4, n, dim, width - 1)
        parents = torch.full((bs, n), -7, dtype=torch.int64)
        args = (x, states, weight, bias, "silu")
        kwargs = dict(
            conv_state_indices=torch.tensor([3, 0, 4], dtype=torch.int32),
            intermediate_conv_window=windows,
            intermediate_state_indices=torch.tensor([2, 0, 1], dtype=torch.int32),
            retrieve_next_token=next_token, retrieve_next_sibling=next_sibling,
            retrieve_parent_token=parents,
        )  # fmt: skip
        if kernel == "sglang":
            out = causal_conv1d_update(*args, **kwargs)
        else:
            out = causal_conv1d_update_on_cpu(None, *args, **kwargs)
        results.append((out, windows, parents, states))
    (out_s, win_s, par_s, st_s), (out_o, win_o, par_o, st_o) = results
    report["conv out max diff"] = float((out_s - out_o).abs().max())
    report["conv windows max diff"] = float((win_s - win_o).abs().max())
    real = tree.parents[:, 1:]
    report["conv parents equal"] = bool(torch.equal(par_s, par_o))
    report["conv parents are the tree's"] = bool(torch.equal(par_o[:, 1:][real >= 0], real[real >= 0]))
    report["conv live state max diff"] = float((st_s - st_o).abs().max())


def check_gdn(report):
    from sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent import (
        fused_sigmoid_gating_delta_rule_update,
    )

    from dflash_sglang.cpu.gated_deltanet.causal_conv1d import parents_from_links
    from dflash_sglang.cpu.gated_deltanet.chunk_and_decode import sigmoid_gating_delta_rule_update_on_cpu

    bs, n, heads, heads_v, key, value = 3, 12, 2, 4, 16, 16
    tree = random_tree(bs, n)
    parents = parents_from_links(*tree.retrieve_arrays(), n).to(torch.int32)
    q, k = (torch.randn(1, bs * n, heads, key) for _ in range(2))
    v = torch.randn(1, bs * n, heads_v, value)
    a, b = (torch.randn(bs * n, heads_v) for _ in range(2))
    A_log, dt_bias = torch.randn(heads_v) * 0.5, torch.randn(heads_v)
    results = []
    for kernel in ("sglang", "ours"):
        states = torch.randn(5, heads_v, value, key, generator=torch.Generator().manual_seed(2))
        before = states.clone()
        buffer = torch.zeros(4, n, heads_v, value, key)
        kwargs = dict(
            A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0, softplus_threshold=20.0, q=q, k=k, v=v,
            b=b, initial_state_source=states, initial_state_indices=torch.tensor([3, 0, 4]),
            cu_seqlens=torch.arange(0, bs * n + 1, n, dtype=torch.int32), use_qk_l2norm_in_kernel=True,
            disable_state_update=True, intermediate_states_buffer=buffer,
            intermediate_state_indices=torch.tensor([2, 0, 1], dtype=torch.int32), cache_steps=n,
            retrieve_parent_token=parents,
        )  # fmt: skip
        if kernel == "sglang":
            out = fused_sigmoid_gating_delta_rule_update(**kwargs)
        else:
            out = sigmoid_gating_delta_rule_update_on_cpu(None, **kwargs)
        results.append((out, buffer, bool(torch.equal(states, before))))
    (out_s, buf_s, kept_s), (out_o, buf_o, kept_o) = results
    report["gdn out max diff"] = float((out_s - out_o).abs().max())
    report["gdn states max diff"] = float((buf_s - buf_o).abs().max())
    report["gdn live state untouched"] = kept_s and kept_o


def main():
    report = {}
    for check in (check_builder, check_conv, check_gdn):
        check(report)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
