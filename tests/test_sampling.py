"""The target distribution the worker verifies against, per request: temperature, top-k, top-p,
min-p as SGLang's sampler applies them; greedy requests (top_k = 1) become the argmax point mass.
And the TP-safe draft argmax over a (padded) vocabulary shard."""

from types import SimpleNamespace

import torch

from dflash_sglang.sampling.distribution import target_distribution, vocab_parallel_argmax


def reference_row(logits, temperature, top_k, top_p, min_p):
    probs = torch.softmax(logits.double() / temperature, -1)
    order = probs.argsort(descending=True)
    kept, mass = [], 0.0
    for rank, token in enumerate(order.tolist()):
        if rank >= top_k or mass > top_p or probs[token] < probs[order[0]] * min_p:
            break
        kept.append(token)
        mass += probs[token].item()
    out = torch.zeros_like(probs)
    out[kept] = probs[kept] / probs[kept].sum()
    return out


def test_target_distribution_per_request_filters():
    g = torch.Generator().manual_seed(0)
    block, vocab = 3, 12
    params = [(1.0, 1 << 30, 1.0, 0.0), (0.7, 3, 1.0, 0.0), (1.3, 1 << 30, 0.6, 0.0), (1.0, 1, 1.0, 0.0),
              (0.9, 5, 0.8, 0.2)]  # fmt: skip
    info = SimpleNamespace(
        temperatures=torch.tensor([[p[0]] for p in params]),
        top_ks=torch.tensor([p[1] for p in params]),
        top_ps=torch.tensor([p[2] for p in params]),
        min_ps=torch.tensor([p[3] for p in params]),
        need_min_p_sampling=True,
    )
    logits = torch.randn(len(params) * block, vocab, generator=g) * 2
    probs = target_distribution(logits, info, block)
    assert probs.shape == (len(params), block, vocab)
    for i, p in enumerate(params):
        for j in range(block):
            torch.testing.assert_close(probs[i, j].double(), reference_row(logits[i * block + j], *p))
    greedy = probs[3]  # top_k = 1: SGLang's encoding of temperature 0
    assert torch.equal(greedy.argmax(-1), logits[9:12].argmax(-1)) and torch.all(greedy.max(-1).values == 1)


def test_vocab_parallel_argmax_ignores_padding_rows():
    hidden = torch.randn(6, 8)
    weight = torch.randn(10, 8)
    weight[7:] = 0  # padded rows: a zero logit must never win over the real vocabulary
    hidden = -hidden.abs()
    weight[:7] = weight[:7].abs()  # all real logits negative
    head = SimpleNamespace(
        weight=weight, shard_indices=SimpleNamespace(org_vocab_start_index=0, num_org_elements=7)
    )
    ids = vocab_parallel_argmax(hidden, head)
    assert torch.equal(ids, (hidden @ weight[:7].T).argmax(-1))
