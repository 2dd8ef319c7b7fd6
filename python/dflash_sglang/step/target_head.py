"""The target's embedding and LM head, as the draft phase reads them: the drafter's block is
embedded with the target's embedding, and its features become drafts through the target's LM head
(vocab-parallel over the head's own group: attention TP under attention DP)."""

from __future__ import annotations

import functools

import torch
from sglang.srt.runtime_context import get_parallel

from ..sampling.distribution import vocab_parallel_logits


class TargetHead:
    """Read from the model runner at each call, as SGLang's own workers do."""

    def __init__(self, model_runner):
        self.model_runner = model_runner

    @property
    def lm_head(self):
        return self.model_runner.model.lm_head

    @property
    def group(self):
        """The process group the LM head's vocabulary is sharded over."""
        return getattr(self.lm_head, "tp_group", get_parallel().tp_group)

    def logits_of(self):
        """[n, H] features -> [n, V] logits over the whole vocabulary."""
        return functools.partial(vocab_parallel_logits, lm_head=self.lm_head, tp_group=self.group)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model_runner.model.get_input_embeddings()(ids)
