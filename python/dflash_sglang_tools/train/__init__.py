"""DFlash drafter training: the recipe (`python -m dflash_sglang_tools.train`) and the embedded tiny pair
(`python -m dflash_sglang_tools.train.tiny_pair`).

    stdlib_corpus.py  instruction/response pairs from the standard library's source (offline data)
    data.py        pairs -> token ids + loss mask; length-bucketed padded batches
    blocks.py      anchors, block inputs, labels, loss weights, the block visibility mask
    loss.py        all blocks of a batch in one drafter forward over the frozen target's features
    feature_cache.py  those features computed once, for a deep target and a shallow drafter
    optim.py, loop.py  AdamW + warm-up/cosine, grad clip, tqdm, periodic evaluation
    evaluate.py    greedy acceptance length with reference.dflash_generate
    regenerate.py  the target's own greedy responses as drafter training data
    recipe.py      the recipe: drafter config for a target, train_drafter
    causal_lm.py   next-token training (the tiny target)
    tiny_pair.py   the deterministic script behind `make tiny-pair`
    tiny_hybrid_pair.py  the same recipe on a Qwen3.5-style hybrid target (`make tiny-hybrid-pair`)
    seed_hybrid_pair.py  the seeds' shape: 16 hybrid layers, a one-layer drafter (`make seed-hybrid-pair`)
    sampled_acceptance.py  tokens a step with point against sampled drafts (`make bench-sampled-drafts`)
    dflash2_selector.py  DFlash2's candidate selector trained on the pair's drafter (`make tiny-dflash2`)
"""
