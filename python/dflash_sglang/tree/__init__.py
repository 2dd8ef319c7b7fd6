"""Tree verification (DDTree, docs/tree.md): many draft paths verified in one target forward.

    build.py     draft trees engine-free: build from the drafter's distributions, walk, accept
    batch.py     the same trees for a batch on the device (fixed shapes, no host reads)
    verify.py    a tree in the step: block, ancestor mask, walk, accepted path moved to the front
    budgets.py   trees as verify widths: what every smaller budget would have accepted
    switches.py  --speculative-eagle-topk K > 1 and N around SGLang's `_handle_dflash`
    replay_ring.py  trees on a Gated DeltaNet target through the ReplaySSM ring (verify, commit)

May import: errors, runtime/, cpu/ (the tree replay kernels), sampling/
and SGLang. The offline simulator is a tool
(`python -m dflash_sglang_tools.tree_sim`, beside the other tools) since it reads the bench
prompts.
"""
