"""DFlash drafter training: the recipe (`python -m dflash_sglang.train`) and the embedded tiny pair
(`python -m dflash_sglang.train.tiny_pair`).

    stdlib_corpus  instruction/response pairs from the standard library's source (offline data)
    data           pairs -> token ids + loss mask; length-bucketed padded batches
    blocks         anchors, block inputs, labels, loss weights, the block visibility mask
    loss           all blocks of a batch in one drafter forward over the frozen target's features
    optim, loop    AdamW + warm-up/cosine, grad clip, tqdm, periodic evaluation
    evaluate       greedy acceptance length with reference.dflash_generate
    regenerate     the target's own greedy responses as drafter training data
    drafter        the recipe: drafter config for a target, train_drafter
    causal_lm      next-token training (the tiny target)
    tiny_pair      the deterministic script behind `make tiny-pair`
    sampled_acceptance  tokens a step with point against sampled drafts (`make bench-sampled-drafts`)
"""
