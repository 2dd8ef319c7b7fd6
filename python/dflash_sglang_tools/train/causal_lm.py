"""Train a transformers causal LM on chat examples: next-token loss on every real token.

Used for the tiny target; the prompt tokens teach it the language as much as the responses.
"""

from __future__ import annotations

import torch

from .data import Batch, Example, epoch_batches
from .loop import Schedule, fit


def lm_loss(model, batch: Batch) -> torch.Tensor:
    positions = torch.arange(batch.input_ids.shape[1])
    labels = batch.input_ids.masked_fill(positions >= batch.lengths.unsqueeze(1), -100)
    return model(input_ids=batch.input_ids, labels=labels, use_cache=False).loss


def train_causal_lm(
    model,
    examples: list[Example],
    schedule: Schedule,
    tokens_per_batch: int,
    pad_id: int,
    seed: int = 0,
    evaluate=None,
) -> list[dict]:
    model.train()

    def loss_of(batch: Batch, step: int):
        return lm_loss(model, batch), {}

    def batches_of_epoch(epoch: int) -> list[Batch]:
        return epoch_batches(examples, tokens_per_batch, pad_id, seed + epoch)

    history = fit(model.parameters(), loss_of, batches_of_epoch, schedule, evaluate, desc="target")
    model.eval()
    return history
