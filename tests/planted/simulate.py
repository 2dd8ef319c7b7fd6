"""The chain server's sampled decoding, engine-free, on the package's own verify code.

Each step does what the worker does for a batch of requests at temperature > 0: the drafter's
drafts after the last token (the law_drafts drafter's `drafts`, the same reading the judge makes), the
target over [prefix, verified token, drafts], the frequency penalty at every block position
(sampling/penalties.py), then `sampled_accept` (sampling/sampled_verify.py) against the request's
filters. Only the engine is missing: no KV cache (the target reads the whole prefix each step) and
no SGLang scheduler. Run under plant.py, it decodes with a planted bug, so power.py can measure
how often the very judge the server tests use catches it.
"""

from __future__ import annotations

import types

import torch

from dflash_sglang.drafter.context import target_features
from dflash_sglang.sampling import penalties
from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept

from ..server.law_drafts import draft_logits_at
from ..server.law_matrix import law
from ..server.law_sampled import SampledDrafter

NO_TOP_K = 1 << 30  # SGLang's TOP_K_ALL


def sampling_info(params: dict, rows: int) -> types.SimpleNamespace:
    """The fields of SGLang's SamplingBatchInfo that the sampled verify reads."""
    top_k = params.get("top_k", NO_TOP_K)
    return types.SimpleNamespace(
        temperatures=torch.full((rows, 1), float(params.get("temperature", 1.0))),
        top_ks=torch.full((rows,), top_k, dtype=torch.int32),
        top_ps=torch.full((rows,), float(params.get("top_p", 1.0))),
        min_ps=torch.full((rows,), float(params.get("min_p", 0.0))),
        need_top_k_sampling=top_k < NO_TOP_K,
        need_top_p_sampling="top_p" in params,
        need_min_p_sampling="min_p" in params,
        max_top_k=top_k if top_k < NO_TOP_K else None,
        is_all_greedy=False,
    )


def padded(rows: list[list[int]]) -> torch.Tensor:
    """Right-padded ids: a causal target never lets a real token see the padding after it."""
    width = max(map(len, rows))
    return torch.tensor([row + [0] * (width - len(row)) for row in rows])


@torch.no_grad()
def simulate_chain(
    target,
    drafter,
    prompt: list[int],
    params: dict,
    n: int,
    max_new: int,
    generator,
) -> list[list[int]]:
    """n completions of `max_new` tokens of one prompt under `params` (ignore_eos); `drafter`: a
    law_drafts.ChainDrafter or ConstantDrafter (point drafts), or a law_sampled.SampledDrafter."""
    block = drafter.block_size
    first_logits = target(torch.tensor([prompt])).logits[:, -1:].double().expand(n, 1, -1)
    first_law = law(first_logits, torch.zeros(n, 1, dtype=torch.long), params)[:, 0]
    done = [[int(t)] for t in torch.multinomial(first_law, 1, generator=generator)[:, 0]]
    while True:
        active = [i for i in range(n) if len(done[i]) < max_new]
        if not active:
            return done
        seqs = [prompt + done[i] for i in active]
        ids = padded(seqs)
        hidden = target(ids, output_hidden_states=True).hidden_states
        info = sampling_info(params, len(seqs))
        drafts, proposal = draw(drafter, target, ids, hidden, seqs, info, generator)
        full = [seq + drafts[r].tolist() for r, seq in enumerate(seqs)]
        logits = target(padded(full)).logits
        at = torch.tensor([len(seq) - 1 for seq in seqs])
        rows = logits[torch.arange(len(seqs)).unsqueeze(1), at.unsqueeze(1) + torch.arange(block)]
        verified = torch.cat([torch.tensor([[seq[-1]] for seq in seqs]), drafts], dim=1)
        penalise(rows, verified, [done[i] for i in active], params)
        flat = rows.reshape(len(seqs) * block, -1)
        result = sampled_accept(drafts, flat, info, block, generator=generator, proposal=proposal)
        for r, i in enumerate(active):
            emitted = result.tokens[r, : int(result.lengths[r])].tolist()
            done[i] = (done[i] + emitted)[:max_new]


def draw(drafter, target, ids, hidden, seqs, info, generator):
    """The drafts [n, B-1] after each sequence's last token, and the law they were drawn from
    (None for point drafts): a law_sampled.SampledDrafter samples them as the server does
    (sampling/sampled_drafts.py's draw_drafts, over the drafter's logits)."""
    chain = drafter.chain if isinstance(drafter, SampledDrafter) else drafter
    rows = [(ids[r : r + 1], tuple(h[r : r + 1] for h in hidden), len(seq) - 1) for r, seq in enumerate(seqs)]
    if chain is drafter:
        return torch.stack([drafter.drafts(target, *row) for row in rows]), None
    features = [target_features(h, chain.model.config.target_layer_ids) for _, h, _ in rows]
    pairs = zip(rows, features, strict=True)
    logits = torch.stack([draft_logits_at(target, chain, ids, f, at) for (ids, _, at), f in pairs]).float()
    return draw_drafts(logits, lambda x: x, info, logits.shape[-1], generator=generator)


def penalise(
    rows: torch.Tensor, block: torch.Tensor, generated: list[list[int]], params: dict, tree=None
) -> None:
    """The frequency penalty at every block position (or a tree's node, `tree`), as the worker's
    ledger applies it (read from its module at call time, so a plant in bug_classes.py reaches it)."""
    penalty = params.get("frequency_penalty", 0.0)
    if not penalty:
        return
    counts = torch.zeros(rows.shape[0], rows.shape[-1])
    for r, tokens in enumerate(generated):
        counts[r].index_add_(0, torch.tensor(tokens), torch.ones(len(tokens)))
    lengths = torch.tensor([len(tokens) for tokens in generated])
    frequency = torch.full((rows.shape[0],), float(penalty))
    params = penalties.PenaltyParams(frequency, None, None, None, None)
    if tree is not None:
        penalties.apply_tree_penalties(rows, tree, counts, lengths, params)
    else:
        penalties.apply_block_penalties(rows, block, counts, lengths, params)
