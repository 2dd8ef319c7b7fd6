"""The per-batch state SGLang carries between DFlash steps (`batch.spec_info`).

SGLang's scheduler, overlap future map and attention backends dispatch on the closed
`SpecInputType` enum, so the state subclasses SGLang's DFLASH draft input and keeps its
spec-v2 behaviour: `prepare_for_decode` reserves `committed + 2 * block` KV slots per request
(rejected slots are overwritten next step, never freed one by one), `filter_batch` /
`merge_batch` follow requests leaving and joining the batch, `create_idle_input` serves idle
data-parallel ranks. What DFlash needs from one step to the next is only the bonus token (the
next block's first token) and the new committed lengths.

A batch does not always carry our subclass: the first decode batch of a PD decode server carries
the plain `DFlashDraftInputV2` SGLang builds (`dflash_disaggregation.py`), so what the step reads
from the state is a function of SGLang's class, not a method of ours.
"""

from __future__ import annotations

import torch
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2


class DFlashDraftState(DFlashDraftInputV2):
    @classmethod
    def create(cls, bonus_tokens: torch.Tensor, new_seq_lens: torch.Tensor) -> DFlashDraftState:
        bs, device = int(new_seq_lens.numel()), bonus_tokens.device
        return cls(
            # Eagle-shaped fields the future map copies; empty for DFlash.
            topk_p=torch.empty((bs, 0), device=device, dtype=torch.float32),
            topk_index=torch.empty((bs, 0), device=device, dtype=torch.int64),
            hidden_states=torch.empty((bs, 0), device=device, dtype=torch.float16),
            bonus_tokens=bonus_tokens.to(torch.int64),
            new_seq_lens=new_seq_lens.to(torch.int64),
        )


def host_read_bound(batch, state: DFlashDraftInputV2, block_size: int) -> torch.Tensor:
    """Per request, how far this step's reads reach, on the host: the committed length plus one
    block, or (overlap, where host lengths lag a step) the reserved length."""
    if batch.seq_lens_cpu is not None:
        return batch.seq_lens_cpu.to(torch.int64) + block_size
    return state.nxt_kv_lens_cpu.to(torch.int64)
