"""The frozen target's features of every drafter example, computed once before the drafter trains.

The drafter's loss reads the outputs of the target layers it is configured with over each training
sequence (loss.py's `target_context`). The target is frozen, so they are the same in every epoch: a
deep target (seed_hybrid_pair.py's 16 layers) would otherwise spend more time in that forward, every
step, than a one-layer drafter spends learning. Batches are right-padded and the target is causal
(attention and Gated DeltaNet alike), so a sequence's features do not depend on the batch it is in
(up to rounding).
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from .data import Batch, Example, collate, length_buckets
from .loss import target_context


class FeatureCache:
    """`cache(batch)`: the [b, S, K*D] target features of a batch of the examples it was built on."""

    def __init__(self, target, examples: list[Example], layer_ids, tokens_per_batch: int, pad_id: int):
        device = target.get_input_embeddings().weight.device
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}  # by token ids: a batch names no examples
        self.width = 0
        groups = length_buckets(examples, tokens_per_batch)
        for group in tqdm(groups, desc="target features", dynamic_ncols=True):
            batch = collate([examples[i] for i in group], pad_id)
            features = target_context(target, batch.input_ids.to(device), layer_ids).cpu()
            self.width = features.shape[-1]
            for row, i in enumerate(group):
                ids = examples[i].input_ids
                self._rows[tuple(ids)] = features[row, : len(ids)].clone()

    def __call__(self, batch: Batch) -> torch.Tensor:
        """Zeros past each row's length: padding positions are never in a block's view (blocks.py)."""
        rows, width = batch.input_ids.shape
        out = torch.zeros(rows, width, self.width)
        for row, length in enumerate(batch.lengths.tolist()):
            out[row, :length] = self._rows[tuple(batch.input_ids[row, :length].tolist())]
        return out

    def megabytes(self) -> float:
        return sum(f.numel() * f.element_size() for f in self._rows.values()) / 2**20
