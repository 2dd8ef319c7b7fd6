"""Benchmarking only: force how many drafts a verify step accepts (docs/adaptive.md).

The speed of speculation under load depends on acceptance, and acceptance needs a drafter trained
for the target. To measure a target of real shapes with no trained drafter, these switches make
each step accept as a realistic drafter would, while the drafter, the verify forward and the
commit all run for real. **The output is then not the target's**: the accepted drafts are the
drafter's tokens, followed by the target's argmax after them. Never set them on a server that
answers users.

- `DFLASH_SGLANG_SIMULATE_ACCEPTANCE=0.85` or `=0.95,0.9,0.85`: per-position conditional rates;
  draft k of each request is accepted with probability p_k given drafts 1..k-1 were (the last
  rate repeats), drawn on the device per request and step.
- `SGLANG_SIMULATE_ACC_LEN=L` (SGLang's own knob, as its built-in DFLASH reads it): every request
  of a step commits the same length, drawn by SGLang's `sample_simulated_acc_len`
  (`SGLANG_SIMULATE_ACC_METHOD`); `SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed` (SGLang's default)
  emits token 100 everywhere, `real-draft-token` the drafts and the target's token after them.

Either way a step commits at most its verify width, so the adaptive width sees the same profile
a narrower step would. Trees are refused with either switch (a tree's acceptance is its walk).
"""

from __future__ import annotations

import torch
from sglang.srt.environ import envs
from sglang.srt.speculative.spec_utils import sample_simulated_acc_len

from ..environment import SIMULATE_ACCEPTANCE
from ..errors import DFlashConfigError
from .accept import Acceptance, accepted_prefix_length

PROFILE_ENV = SIMULATE_ACCEPTANCE.name
SGLANG_LENGTH_ENV = "SGLANG_SIMULATE_ACC_LEN"
FIXED_TOKEN = 100  # SGLang's "fixed" token mode emits this id


class SimulatedAcceptance:
    def __init__(self, rates: list[float] | None, length: float | None, method: str, token_mode: str):
        self.rates, self.length, self.method, self.token_mode = rates, length, method, token_mode
        self.rate_table: torch.Tensor | None = None  # [B-1] per-position rates, on the device

    def placed(self, block_size: int, device) -> SimulatedAcceptance:
        if self.rates is not None:
            n = block_size - 1
            self.rate_table = torch.tensor((self.rates + [self.rates[-1]] * n)[:n], device=device)
        return self

    @classmethod
    def from_env(cls) -> SimulatedAcceptance | None:
        profile = SIMULATE_ACCEPTANCE.value()  # per-position rates, or () where unset
        length = float(envs.SGLANG_SIMULATE_ACC_LEN.get())
        if profile and length > 0:
            raise DFlashConfigError(f"{PROFILE_ENV} and {SGLANG_LENGTH_ENV}: set one of the two")
        if profile:
            return cls(list(profile), None, "", "real-draft-token")
        if length <= 0:
            return None
        token_mode = envs.SGLANG_SIMULATE_ACC_TOKEN_MODE.get()
        if token_mode not in ("fixed", "real-draft-token"):
            raise DFlashConfigError(
                f"SGLANG_SIMULATE_ACC_TOKEN_MODE = {token_mode!r}: expected 'fixed' or 'real-draft-token'"
            )
        return cls(None, length, envs.SGLANG_SIMULATE_ACC_METHOD.get(), token_mode)

    @classmethod
    def for_worker(cls, tree, block_size: int, device) -> SimulatedAcceptance | None:
        simulated = cls.from_env()
        if simulated is not None and tree is not None:
            raise DFlashConfigError(
                f"{simulated.describe} with --speculative-eagle-topk {tree.max_children} (DFLASH tree "
                "verification): a tree's acceptance is its walk; unset one of the two"
            )
        return simulated and simulated.placed(block_size, device)

    @property
    def describe(self) -> str:
        if self.rates is not None:
            return f"{PROFILE_ENV}={','.join(f'{r:g}' for r in self.rates)}"
        return f"{SGLANG_LENGTH_ENV}={self.length:g} ({self.method}, {self.token_mode} tokens)"

    def accept(self, block_tokens: torch.Tensor, target_tokens: torch.Tensor) -> Acceptance:
        """block_tokens: [bs, w] the verified block; target_tokens: [bs, w] the target's argmax."""
        bs, width = block_tokens.shape
        if self.rates is None:  # SGLang's one length per step, drawn on the host
            accepted = torch.full((bs,), sample_simulated_acc_len(self.length, self.method, width) - 1,
                                  dtype=torch.int64, device=block_tokens.device)  # fmt: skip
        else:
            accepted = accepted_prefix_length(
                torch.rand(bs, width - 1, device=block_tokens.device) < self.rate_table[: width - 1]
            )
        if self.token_mode == "fixed":
            return Acceptance(accepted + 1, torch.full_like(block_tokens, FIXED_TOKEN))
        # Drafts before the cut, then the target's own token at the cut.
        columns = torch.arange(width, device=block_tokens.device)
        drafts = torch.cat([block_tokens[:, 1:], block_tokens[:, :1]], dim=1)
        tokens = torch.where(columns < accepted.unsqueeze(1), drafts, target_tokens)
        return Acceptance(accepted + 1, tokens)
