"""Per-request target distributions and the TP-safe greedy draft head.

`target_distribution` is what SGLang's sampler would draw each verified position from
(temperature, then top-k / top-p / min-p, renormalised), so rejection sampling against it keeps
the server's sampling law. Greedy requests carry top_k = 1 in SGLang, so their distribution is
the argmax point mass and the same rule decides them exactly as greedy decoding would.
"""

from __future__ import annotations

import torch


def target_distribution(logits: torch.Tensor, sampling_info, block_size: int) -> torch.Tensor:
    """[bs * B, V] verify logits -> [bs, B, V] sampling probabilities per block position."""
    vocab = logits.shape[-1]
    logits = logits.float().view(-1, block_size, vocab)

    def per_row(values: torch.Tensor) -> torch.Tensor:
        return values.view(-1, 1, 1)  # SGLang keeps sampling parameters on the logits' device

    probs = torch.softmax(logits / per_row(sampling_info.temperatures.float()), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(vocab, device=logits.device).view(1, 1, -1)
    keep = (rank < per_row(sampling_info.top_ks)) & (
        (sorted_probs.cumsum(-1) - sorted_probs) <= per_row(sampling_info.top_ps.float())
    )
    if sampling_info.need_min_p_sampling:
        keep = keep & (sorted_probs >= sorted_probs[..., :1] * per_row(sampling_info.min_ps.float()))
    sorted_probs = sorted_probs * keep
    sorted_probs /= sorted_probs.sum(-1, keepdim=True)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def local_logits(hidden: torch.Tensor, lm_head, padded: bool = False) -> tuple[torch.Tensor, int]:
    """This rank's float logits of [N, D] hidden states over its vocabulary shard (padded rows
    dropped, or kept with `padded`: every rank's shard is then as long), and the shard's first id."""
    weight = lm_head.weight
    shard = getattr(lm_head, "shard_indices", None)
    if shard is None:
        return (hidden.to(weight.dtype) @ weight.T).float(), 0
    count = shard.num_org_elements_padded if padded else shard.num_org_elements
    return (hidden.to(weight.dtype) @ weight[:count].T).float(), shard.org_vocab_start_index


def vocab_parallel_argmax(hidden: torch.Tensor, lm_head, tp_group=None) -> torch.Tensor:
    """argmax over the target's LM head for [N, D] hidden states, without gathering logits.

    Each TP rank holds a vocabulary shard (padded rows excluded via `shard_indices`); ranks
    exchange only their local (max, id) pairs.
    """
    logits, start = local_logits(hidden, lm_head)
    local_max, local_id = logits.max(dim=-1)
    local_id = local_id + start
    if tp_group is None or tp_group.world_size == 1:
        return local_id
    maxes = tp_group.all_gather(local_max.unsqueeze(0), dim=0)  # [tp, N]
    ids = tp_group.all_gather(local_id.unsqueeze(0), dim=0)
    return ids.gather(0, maxes.argmax(dim=0, keepdim=True)).squeeze(0)


def vocab_parallel_topk(
    hidden: torch.Tensor, lm_head, k: int, tp_group=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best (logit, id) of [N, D] hidden states over the target's LM head [N, k], as
    `vocab_parallel_argmax`: ranks exchange only their local top k, then take the global top k."""
    logits, start = local_logits(hidden, lm_head)
    values, ids = logits.topk(k, dim=-1)
    ids = ids + start
    if tp_group is None or tp_group.world_size == 1:
        return values, ids
    values = tp_group.all_gather(values, dim=-1)  # [N, tp * k]
    ids = tp_group.all_gather(ids, dim=-1)
    values, best = values.topk(k, dim=-1)
    return values, ids.gather(-1, best)


def vocab_parallel_logits(hidden: torch.Tensor, lm_head, tp_group=None) -> torch.Tensor:
    """[N, D] hidden states -> their logits over the whole vocabulary [N, V] (padded rows
    dropped), gathered from the TP ranks' shards; for drafters that read every logit (Domino)."""
    if tp_group is None or tp_group.world_size == 1:
        return local_logits(hidden, lm_head)[0]
    # Shards of equal (padded) length in rank order: the gathered row is the padded vocabulary.
    return tp_group.all_gather(local_logits(hidden, lm_head, padded=True)[0], dim=-1)[
        :, : lm_head.org_vocab_size
    ]
