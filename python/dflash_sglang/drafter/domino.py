"""The Domino drafter variant (`dflash_config.projector_type: "domino"`), as SGLang 0.5.23 defines
it (`domino_greedy_rollout` in sglang/srt/speculative/domino_utils.py).

The DFlash backbone's features z (block positions 1..B-1, or 0..B-2 with `shift_label`) give base
logits through the target's LM head. The first draft is their argmax. A GRU then reads the
target embeddings of the verified token and of each draft in turn (`prefix_gru`, no biases, from
a zero state), and every later draft is the argmax of the base logits plus a correction from
`embed_proj` (Linear(H + G, E), SiLU, Linear(E, V)) of [z_i ; GRU state]. With a candidate pool
of K < V tokens (`--speculative-domino-candidate-pool-size`, SGLang's default 2048), drafts 2..
are chosen among the K tokens whose best base logit over those positions is highest, one pool a
block. The drafts are point proposals: the verify's acceptance is the chain's, the output exact.
Engine-free; the SGLang drafter runs this same code over logits it gathers across TP ranks.
"""

from __future__ import annotations

import torch
from torch import nn

DEFAULT_POOL = 2048  # SGLang's --speculative-domino-candidate-pool-size default


def add_domino(model: nn.Module, config) -> None:
    """The drafter's `prefix_gru` and `embed_proj` (None when plain), under the checkpoint's names:
    `prefix_gru.weight_{ih,hh}_l0` [3G, H] / [3G, G], `embed_proj.{0,2}.weight` [E, H + G] / [V, E]."""
    model.prefix_gru = model.embed_proj = None
    if config.domino_gru_dim:
        hidden, gru, emb = config.hidden_size, config.domino_gru_dim, config.domino_emb_dim
        model.prefix_gru = nn.GRU(hidden, gru, num_layers=1, bias=False, batch_first=True)
        model.embed_proj = nn.Sequential(
            nn.Linear(hidden + gru, emb, bias=False), nn.SiLU(), nn.Linear(emb, config.vocab_size, bias=False)
        )


def proposal_features(block_hidden: torch.Tensor, shift_label: bool) -> torch.Tensor:
    """[b, B, H] drafter features -> the B-1 the drafts come from."""
    start = 0 if shift_label else 1
    return block_hidden[:, start : start + block_hidden.shape[1] - 1]


def domino_block_drafts(block_hidden: torch.Tensor, shift_label: bool, logits_of, gru: nn.GRU,
                        embed_proj: nn.Sequential, verified: torch.Tensor, embed,
                        pool: int = DEFAULT_POOL) -> torch.Tensor:  # fmt: skip
    """The drafts [b, B-1] of a block's drafter features [b, B, H]: the proposal features, their
    base logits through `logits_of` ([N, H] -> [N, V], the target's LM head), the rollout."""
    z = proposal_features(block_hidden, shift_label)
    base = logits_of(z.flatten(0, 1)).view(*z.shape[:2], -1)
    return domino_drafts(gru, embed_proj, z, base, verified, embed, pool)


@torch.no_grad()
def domino_drafts(gru: nn.GRU, embed_proj: nn.Sequential, z: torch.Tensor, base: torch.Tensor,
                  verified: torch.Tensor, embed, pool: int = DEFAULT_POOL) -> torch.Tensor:  # fmt: skip
    """z [b, P, H] proposal features, base [b, P, V] their base logits (the target's LM head),
    verified [b] tokens, embed: ids -> the target's embeddings -> the drafts [b, P]."""
    steps, vocab = base.shape[1], base.shape[2]
    first = base[:, 0].argmax(-1)
    drafts = [first]
    if steps == 1:
        return first[:, None]
    pool = min(pool, vocab)
    pooled = 0 < pool < vocab
    if pooled:  # one pool a block: the best base logit each token reaches at positions 1..P-1
        pool_ids = base[:, 1:].amax(dim=1).topk(pool, dim=-1, sorted=False).indices
        pool_base = base[:, 1:].gather(2, pool_ids[:, None, :].expand(-1, steps - 1, -1))  # [b, P-1, K]
        pool_head = nn.functional.embedding(pool_ids, embed_proj[2].weight)  # [b, K, E]
    _, state = gru(embed(torch.stack((verified, first), dim=1)))  # [1, b, G]
    for i in range(1, steps):
        correction = embed_proj[1](embed_proj[0](torch.cat((z[:, i], state[0]), dim=-1)))
        if pooled:
            scores = pool_base[:, i - 1] + torch.bmm(pool_head, correction.unsqueeze(-1)).squeeze(-1)
            draft = pool_ids.gather(1, scores.argmax(-1, keepdim=True)).squeeze(1)
        else:
            draft = (base[:, i] + embed_proj[2](correction)).argmax(-1)
        drafts.append(draft)
        if i + 1 < steps:
            state = torch.ops.aten.gru_cell(
                embed(draft), state[0], gru.weight_ih_l0, gru.weight_hh_l0, None, None
            )[None]
    return torch.stack(drafts, dim=1)
