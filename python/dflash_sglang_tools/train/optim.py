"""AdamW with a linear warm-up into a cosine decay, and one clipped optimizer step."""

from __future__ import annotations

import math

import torch


def warmup_cosine(total_steps: int, warmup_ratio: float, floor: float = 0.0):
    """lr multiplier for step t: linear from ~0 to 1 over the warm-up, then cosine down to `floor`."""
    warmup = max(1, round(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def make_optimizer(params, lr: float, total_steps: int, warmup_ratio: float, weight_decay: float = 0.0):
    params = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, warmup_ratio))
    return optimizer, schedule


def optimizer_step(loss: torch.Tensor, optimizer, schedule, max_grad_norm: float = 1.0) -> float:
    """Backward, clip, step, advance the schedule; returns the gradient norm before clipping."""
    loss.backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)
