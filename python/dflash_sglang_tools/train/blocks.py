"""The drafter's training blocks: random anchors, block inputs, labels, loss weights, visibility.

For every sequence, anchors are drawn among its response tokens. Block b is
`[token at anchor_b, MASK x (B-1)]` at positions `anchor_b .. anchor_b + B-1`, exactly what the
drafter sees at inference after the anchor token was committed. Block position k (1..B-1)
predicts the sequence token at `anchor_b + k`, weighted `exp(-(k-1)/gamma)`: early positions
matter most, since one wrong draft makes every later one worthless.

All blocks of a sequence share one forward pass. Keys are laid out `[context 0..S-1 | blocks]`;
a block query sees the target context strictly before its anchor (at inference the anchor's own
target features do not exist yet) and its own block, never another block.
"""

from __future__ import annotations

import dataclasses

import torch

IGNORE = -100


@dataclasses.dataclass
class Blocks:
    input_ids: torch.Tensor  # [b, N*B] anchor token then mask tokens, per block
    positions: torch.Tensor  # [b, N*B] anchor .. anchor + B - 1
    labels: torch.Tensor  # [b, N*B] target token, IGNORE where nothing is learned
    weights: torch.Tensor  # [b, N*B] loss weight, 0 where labels are IGNORE
    visible: torch.Tensor  # [b, N*B, S + N*B] bool: keys each block query attends to


def position_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[B] weights: 0 for the anchor, exp(-(k-1)/gamma) for block position k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32)
    return torch.where(k > 0, torch.exp(-(k - 1) / gamma), torch.zeros(()))


def sample_anchors(loss_mask: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """[count] sorted anchor positions of one sequence, -1 for padding blocks.

    Candidates are response tokens that still have a response token after them."""
    candidates = torch.nonzero(loss_mask[:-1] & loss_mask[1:]).flatten()
    picked = candidates[torch.randperm(len(candidates), generator=generator)[:count]].sort().values
    return torch.cat([picked, picked.new_full((count - len(picked),), -1)])


def block_visibility_mask(anchors: torch.Tensor, context_length: int, block_size: int) -> torch.Tensor:
    """[b, N*B, S + N*B]: context keys before the query's anchor, and keys of its own block.

    A padding block (anchor -1) sees only itself, so its attention is defined (and unused)."""
    b, n = anchors.shape
    query_anchor = anchors.repeat_interleave(block_size, dim=1)  # [b, N*B]
    context = torch.arange(context_length, device=anchors.device)
    sees_context = context.view(1, 1, -1) < query_anchor.unsqueeze(-1)
    block_of = torch.arange(n, device=anchors.device).repeat_interleave(block_size)
    sees_block = (block_of.view(-1, 1) == block_of.view(1, -1)).expand(b, -1, -1)
    return torch.cat([sees_context, sees_block], dim=-1)


def make_blocks(
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    anchors: torch.Tensor,
    block_size: int,
    mask_token_id: int,
    gamma: float,
) -> Blocks:
    """Blocks for a right-padded batch `input_ids` [b, S] given `anchors` [b, N] (-1: padding)."""
    b, s = input_ids.shape
    n = anchors.shape[1]
    valid = anchors >= 0
    offsets = torch.arange(block_size, device=input_ids.device)
    positions = anchors.clamp(min=0).unsqueeze(-1) + offsets  # [b, N, B]
    in_bounds = positions < s
    gathered = input_ids.gather(1, positions.clamp(max=s - 1).flatten(1)).view(b, n, block_size)
    learn = valid.unsqueeze(-1) & in_bounds & (offsets > 0)
    learn &= loss_mask.gather(1, positions.clamp(max=s - 1).flatten(1)).view(b, n, block_size)
    block_ids = torch.full_like(gathered, mask_token_id)
    block_ids[..., 0] = torch.where(valid, gathered[..., 0], mask_token_id)  # padding: masks only
    weights = position_weights(block_size, gamma).to(input_ids.device).expand(b, n, -1) * learn
    return Blocks(
        input_ids=block_ids.flatten(1),
        positions=positions.flatten(1),
        labels=torch.where(learn, gathered, IGNORE).flatten(1),
        weights=weights.flatten(1),
        visible=block_visibility_mask(anchors, s, block_size),
    )


def default_gamma(block_size: int) -> float:
    """The paper's decay: 7 for block 16, 5 for block 10, 4 for block 8 (and below)."""
    return 7.0 if block_size >= 16 else 5.0 if block_size >= 10 else 4.0
