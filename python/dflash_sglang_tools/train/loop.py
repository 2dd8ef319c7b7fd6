"""The training loop both trainings share: epochs of batches, AdamW + warm-up/cosine, grad clip
1.0, a tqdm bar with the running metrics, and an evaluation every `eval_every` steps and at the end."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from tqdm import tqdm

from .data import Batch
from .optim import make_optimizer, optimizer_step


@dataclasses.dataclass
class Schedule:
    epochs: int = 1
    lr: float = 6e-4
    warmup_ratio: float = 0.04
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    eval_every: int = 0  # steps; 0: only at the end


# loss_of(batch, step) -> (loss, {metric: value}); evaluate() -> {metric: value}
LossFn = Callable[[Batch, int], tuple[torch.Tensor, dict[str, float]]]


def fit(
    params,
    loss_of: LossFn,
    batches_of_epoch: Callable[[int], list[Batch]],
    schedule: Schedule,
    evaluate: Callable[[], dict[str, float]] | None = None,
    desc: str = "train",
) -> list[dict[str, float]]:
    """Train `params`; returns the evaluations (each with its step)."""
    per_epoch = len(batches_of_epoch(0))
    total = per_epoch * schedule.epochs
    optimizer, lr_schedule = make_optimizer(
        params, schedule.lr, total, schedule.warmup_ratio, schedule.weight_decay
    )
    history: list[dict[str, float]] = []
    step = 0
    with tqdm(total=total, desc=desc, dynamic_ncols=True) as bar:
        for epoch in range(schedule.epochs):
            for batch in batches_of_epoch(epoch):
                loss, metrics = loss_of(batch, step)
                grad_norm = optimizer_step(loss, optimizer, lr_schedule, schedule.max_grad_norm)
                step += 1
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}", grad=f"{grad_norm:.2f}",
                                **{k: f"{v:.3f}" for k, v in metrics.items()})  # fmt: skip
                if evaluate and (step == total or (schedule.eval_every and step % schedule.eval_every == 0)):
                    result = {"step": step, **evaluate()}
                    history.append(result)
                    bar.write(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in result.items()))  # fmt: skip
    return history
