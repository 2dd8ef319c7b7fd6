"""The grouped-convolution drafter variant (`dflash_config.conv_kernel_size` taps,
`conv_group_size` channels a group), as SGLang 0.5.23's `DFlashGroupedConv` defines it.

Each sublayer of a decoder layer (attention, MLP) is wrapped: `prepare` convolves the sublayer's
normed input along the block and returns, from the same projection of that input, the kernel
`finish` convolves the sublayer's output with. A kernel is per token: `base_kernel` [2, taps, D]
(input side, output side) plus a per-group delta projected from the token. Tap t of position i
reads position i - t of the same block, zero before the block's start, so blocks never mix. The
injected context is not convolved (SGLang's worker writes it from the plain projections too).
Engine-free, eager: the reference and the SGLang drafter run this same code.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import DFlashConfigError


class GroupedBlockConv(nn.Module):
    def __init__(self, hidden_size: int, taps: int, group_size: int, block_size: int):
        super().__init__()
        if hidden_size % group_size:
            raise DFlashConfigError(
                f"dflash_config.conv_group_size = {group_size} does not divide hidden_size = {hidden_size}"
            )
        self.taps, self.group_size, self.groups = taps, group_size, hidden_size // group_size
        self.block_size = block_size  # how a flat [N, D] batch splits into blocks
        base = torch.zeros(2, taps, hidden_size)
        base[:, 0] = 1.0  # the identity kernel, as training starts
        self.base_kernel = nn.Parameter(base)
        self.kernel_projection = nn.Linear(hidden_size, 2 * taps * self.groups, bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sublayer's input convolved, and the output side's per-token kernel deltas."""
        deltas = self.kernel_projection(x).view(*x.shape[:-1], 2, self.taps, self.groups)
        return self._convolve(x, deltas[..., 0, :, :], side=0), deltas[..., 1, :, :]

    def finish(self, x: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
        return self._convolve(x, deltas, side=1)

    def _convolve(self, x: torch.Tensor, deltas: torch.Tensor, side: int) -> torch.Tensor:
        """x [.., B, D] (or flat [N, D], N a whole number of blocks), deltas [.., taps, groups]."""
        shape = x.shape
        if x.dim() == 2:
            x = x.view(-1, self.block_size, shape[-1])
            deltas = deltas.view(-1, self.block_size, *deltas.shape[1:])
        channels = x.unflatten(-1, (self.groups, self.group_size))  # [.., B, G, g]
        kernel = self.base_kernel[side].view(self.taps, self.groups, self.group_size) + deltas.unsqueeze(-1)
        out = kernel[..., 0, :, :] * channels
        for tap in range(1, min(self.taps, x.shape[-2])):  # i reads i - tap of its block, zero before
            shifted = F.pad(channels[..., :-tap, :, :], (0, 0, 0, 0, tap, 0))
            out = out + kernel[..., tap, :, :] * shifted
        return out.flatten(-2).view(shape)


def wrapped(conv: GroupedBlockConv | None, sublayer, x: torch.Tensor) -> torch.Tensor:
    """sublayer(x), convolved before and after when the layer has a convolution."""
    if conv is None:
        return sublayer(x)
    x, deltas = conv.prepare(x)
    return conv.finish(sublayer(x), deltas)
