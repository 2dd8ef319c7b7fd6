"""What the drafter reads from the target: the features of the configured target layers, and the
keys/values each drafter layer projects from them at the committed positions (engine-free)."""

from __future__ import annotations

import torch


class DraftContextCache:
    """Per-layer keys/values of the committed context positions; the block is never stored."""

    def __init__(self, num_layers: int, batch: int = 1, device=None):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.positions = torch.zeros(batch, 0, dtype=torch.long, device=device)

    def __len__(self) -> int:
        return self.positions.shape[1]

    def extend(self, layer: int, keys: torch.Tensor, values: torch.Tensor):
        if self.keys[layer] is not None:
            keys = torch.cat([self.keys[layer], keys], dim=1)
            values = torch.cat([self.values[layer], values], dim=1)
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def extend_positions(self, positions: torch.Tensor) -> None:
        self.positions = torch.cat([self.positions, positions], dim=1)


def target_features(hidden_states: tuple[torch.Tensor, ...], layer_ids) -> torch.Tensor:
    """Concatenate the outputs of the target layers `layer_ids` ([.., K*D]).

    transformers' `hidden_states[0]` is the embedding output and `hidden_states[L + 1]` the raw
    output of decoder layer L; ids stop below the last layer, so the final norm never enters.
    """
    return torch.cat([hidden_states[layer + 1] for layer in layer_ids], dim=-1)
