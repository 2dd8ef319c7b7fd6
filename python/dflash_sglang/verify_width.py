"""How many of the drafted block's positions a decode step verifies (docs/adaptive.md).

The drafter always drafts its whole block B in one forward; the step may verify only the first w
positions (1 <= w <= B): the verified token and w - 1 drafts. w = 1 is plain decoding through the
verify path (the bonus token only). Whatever w is, the step stays exact: the target verifies what
it is given and the commit keeps the longest correct prefix plus one token of its own.

One width per batch: SGLang's verify forward, its CUDA graphs and the scheduler's result unpacking
(`speculative_num_draft_tokens` is the row stride) take one `draft_token_num` per batch. Every TP
rank must choose the same width (the verify collectives would desynchronise otherwise): the
choice depends only on the step count and host state every rank shares. Under attention DP the
scheduler announces each rank's token count as bs x B before the step, so the width stays B.

Switches: `DFLASH_SGLANG_VERIFY_WIDTHS="8,1,4"` forces a cycle of widths step by step (a testing
and benchmarking switch: the lossless-across-switching tests use it).
"""

from __future__ import annotations

import os

import torch

from . import dp_attention
from .config import DFlashConfigError

WIDTHS_ENV = "DFLASH_SGLANG_VERIFY_WIDTHS"


def forced_widths(block_size: int) -> tuple[int, ...]:
    """The forced cycle of widths, or () when none is set; each must be in 1..block_size."""
    text = os.environ.get(WIDTHS_ENV, "").strip()
    if not text:
        return ()
    try:
        widths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise DFlashConfigError(f"{WIDTHS_ENV}={text!r}: expected comma-separated integers") from None
    if not widths or any(not 1 <= w <= block_size for w in widths):
        raise DFlashConfigError(f"{WIDTHS_ENV}={text!r}: each width must be in 1..{block_size} (the block)")
    if dp_attention.enabled():
        raise DFlashConfigError(f"{WIDTHS_ENV} with --enable-dp-attention: DP ranks verify whole blocks")
    return widths


class VerifyWidth:
    """The width of every decode step: the block size, or the forced cycle."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.pattern = forced_widths(block_size)
        self.steps = 0

    @property
    def describe(self) -> str:
        return f"forced cycle {list(self.pattern)}" if self.pattern else "the block size"

    def choose(self, batch) -> int:
        if not self.pattern:
            return self.block_size
        width = self.pattern[self.steps % len(self.pattern)]
        self.steps += 1
        return width


def narrow(block, width: int, batch, translator, host_lens: torch.Tensor):
    """The block's first `width` positions per request, with their own KV plan for the verify."""
    bs, size = block.tokens.shape
    if width == size:
        return block
    cache_loc = block.cache_loc.view(bs, size)[:, :width].flatten()
    kv_plan = translator.plan(
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens,
        seq_lens_cpu=host_lens,
        write_virtual=cache_loc,
        read_extent=width,
    )
    return block._replace(
        tokens=block.tokens[:, :width],
        positions=block.positions.view(bs, size)[:, :width].flatten(),
        cache_loc=cache_loc,
        kv_plan=kv_plan,
        draft_loc=block.draft_loc[:, :width],
    )
