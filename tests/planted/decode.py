"""The chain's sampled decoding, engine-free, through the package's own draw and verify, with each
step's acceptance recorded: what a server's chain law test samples, on any pair.

simulate.py decodes the trained pair with point or sampled drafts; this adds block verification
and the pattern (law_pattern.Steps: the tokens each step committed, what a server's step record
holds) and takes the toy pair too (toy_pair.py). Each step, for the batch's active requests: the
drafter's logits after the last token, then by `path`

    point    the argmax drafts (the plain drafter at DFLASH_SGLANG_SAMPLED_DRAFTS=0)
    sampled  drafts drawn from q (sampling/sampled_drafts.py's draw_drafts), judged token by token
    block    the same drafts judged as one block (SGLang's --speculative-use-block-verification)

then the target's rows over [verified token, drafts], the penalties at every block position
(sampling/penalties.py), and sampling/sampled_verify.py's `sampled_accept`; or by `path`

    tree     a draft tree of TREE_NODES nodes from the drafter's distributions (tree/batch.py, as a
             tree server builds it), the target's row at every node (its root path after the
             sequence), the penalties along each root path, one draw of the target's law at every
             node (sampling/target_law.py's draw_every_row) and the walk (tree/verify.py's accept)

Every one of those is called through its module, so bug_classes.py can plant into the very
functions a server runs.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_sglang.drafter.context import target_features
from dflash_sglang.sampling import sampled_drafts, sampled_verify, target_law
from dflash_sglang.tree import verify as tree_verify
from dflash_sglang.tree.batch import build_batch_trees

from ..server.law_drafts import draft_logits_at
from ..server.law_matrix import law
from ..server.law_pattern import Steps
from .simulate import padded, penalise, sampling_info

PATHS = ("point", "sampled", "block", "tree")
CHAINS = PATHS[:3]
# The tree: the server tests' N (tests/server/test_tree.py's trees of 8 nodes) and a top-k of 4.
TREE_NODES, TREE_CHILDREN = 8, 4


@dataclasses.dataclass
class Decoded:
    completions: list[list[int]]
    steps: list[Steps]


@torch.no_grad()
def decode(
    target, drafter, prompt: list[int], params: dict, n: int, max_new: int, path: str, generator
) -> Decoded:
    """n completions of `max_new` tokens of one prompt under `params`, decoded as one batch."""
    first_logits = target(torch.tensor([prompt])).logits[:, -1:].double().expand(n, 1, -1)
    first_law = law(first_logits, torch.zeros(n, 1, dtype=torch.long), params)[:, 0]
    done = [[int(t)] for t in torch.multinomial(first_law, 1, generator=generator)[:, 0]]
    counts: list[list[int]] = [[] for _ in range(n)]
    while True:
        active = [r for r in range(n) if len(done[r]) < max_new]
        if not active:
            return Decoded(done, [Steps(c) for c in counts])
        seqs = [prompt + done[r] for r in active]
        info = sampling_info(params, len(seqs))
        q_logits = step_draft_logits(drafter, target, seqs).float()  # [bs, B-1, V]
        generated = [done[r] for r in active]
        if path == "tree":
            result = tree_step(target, seqs, q_logits, info, generated, params)
        else:
            result = chain_step(target, seqs, q_logits, info, generated, params, path, generator)
        for r, i in enumerate(active):
            length = int(result.lengths[r])
            counts[i].append(length)
            done[i] = (done[i] + result.tokens[r, :length].tolist())[:max_new]


def chain_step(target, seqs, q_logits, info, generated, params: dict, path: str, generator):
    """One chain step: the drafts (argmax, or drawn from q), the target's rows over the block, the
    penalties, the sampled verify."""
    block, vocab, proposal = q_logits.shape[1] + 1, q_logits.shape[-1], None
    if path == "point":
        drafts = q_logits.argmax(-1)
    else:
        drafts, proposal = sampled_drafts.draw_drafts(q_logits, lambda x: x, info, vocab, generator=generator)
    full = [seq + drafts[r].tolist() for r, seq in enumerate(seqs)]
    logits = target(padded(full)).logits.float()
    at = torch.tensor([len(seq) - 1 for seq in seqs])
    rows = logits[torch.arange(len(seqs)).unsqueeze(1), at.unsqueeze(1) + torch.arange(block)]
    verified = torch.cat([torch.tensor([[seq[-1]] for seq in seqs]), drafts], dim=1)
    penalise(rows, verified, generated, params)
    return sampled_verify.sampled_accept(
        drafts, rows.reshape(len(seqs) * block, -1), info, block, generator=generator,
        proposal=proposal, block_verification=path == "block",
    )  # fmt: skip


def tree_step(target, seqs, q_logits, info, generated, params: dict):
    """One tree step as a tree server runs it (step/verifying.py's TreeRule): the tree, the rows,
    the penalties along each root path, a draw at every node, the walk. The draws use torch's
    global generator, as draw_every_row does on a server."""
    roots = torch.tensor([seq[-1] for seq in seqs])
    tree = build_batch_trees(roots, torch.log_softmax(q_logits, -1), TREE_NODES - 1, TREE_CHILDREN)
    rows = node_rows(target, seqs, tree)
    penalise(rows, tree.tokens, generated, params, tree=tree)
    predictions = target_law.draw_every_row(rows.flatten(0, 1), info, TREE_NODES, None)
    return tree_verify.accept(tree, predictions)[0]


def node_rows(target, seqs, tree) -> torch.Tensor:
    """[bs, N, V]: the target's logits after each node's root path (the root: the sequence's last
    token; a padding node, never accepted, reads its own token alone after the sequence)."""
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    paths = []
    for r, seq in enumerate(seqs):
        for k in range(len(tokens[r])):
            path, node = [], k
            while node > 0:
                path.append(tokens[r][node])
                node = parents[r][node]
            paths.append(seq + path[::-1])
    logits = target(padded(paths)).logits.float()
    last = torch.tensor([len(path) - 1 for path in paths])
    return logits[torch.arange(len(paths)), last].view(len(seqs), len(tokens[0]), -1)


def step_draft_logits(drafter, target, seqs: list[list[int]]) -> torch.Tensor:
    """[n, B-1, V]: the drafter's logits after each sequence's last token (the toy's lookup, or the
    chain's drafter over the target's features, as simulate.draw reads them)."""
    if hasattr(drafter, "step_logits"):
        return drafter.step_logits(target, seqs)
    chain = getattr(drafter, "chain", drafter)
    ids = padded(seqs)
    hidden = target(ids, output_hidden_states=True).hidden_states
    rows = []
    for r, seq in enumerate(seqs):
        features = target_features(tuple(h[r : r + 1] for h in hidden), chain.model.config.target_layer_ids)
        rows.append(draft_logits_at(target, chain, ids[r : r + 1], features, len(seq) - 1))
    return torch.stack(rows)
