"""Broken drafters for the any-drafter tests, swapped into a running server through SGLang's own
weight update addressed to the drafter alone (`"selector": "draft"`), and swapped back after."""

from __future__ import annotations

import contextlib

import torch
from safetensors.torch import load_file


def _random(name, weight):
    return torch.randn(weight.shape, generator=torch.Generator().manual_seed(len(name)))


BROKEN = {
    "random": _random,
    "nan": lambda name, weight: torch.full_like(weight, float("nan")),
    "inf": lambda name, weight: torch.where(torch.rand_like(weight) < 0.5, float("inf"), float("-inf")),
    "overflow": lambda name, weight: weight * 1e30,
    "always_token_0": lambda name, weight: torch.zeros_like(weight) if name == "norm.weight" else weight,
}


def drafter_weights(draft_dir) -> dict:
    return load_file(str(draft_dir / "model.safetensors"))


def load_drafter(server, named: list) -> None:
    from sglang.srt.utils import MultiprocessingSerializer

    torch.multiprocessing.set_sharing_strategy("file_system")  # readable by an unrelated process
    payload = MultiprocessingSerializer.serialize(named, output_str=True)
    assert server.post("/begin_weight_update", {"selector": "draft"})["success"]
    reply = server.post(
        "/update_weights_from_tensor", {"serialized_named_tensors": [payload], "selector": "draft"}
    )
    assert reply["success"], reply
    assert server.post("/end_weight_update", {})["success"]


@contextlib.contextmanager
def drafter(server, weights: dict, kind: str):
    torch.manual_seed(0)
    load_drafter(server, [(name, BROKEN[kind](name, w)) for name, w in weights.items()])
    try:
        yield
    finally:
        load_drafter(server, list(weights.items()))
