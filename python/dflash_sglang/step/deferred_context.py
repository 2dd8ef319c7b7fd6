"""Context injection deferred over plain steps (docs/adaptive.md, "A plain step's injection").

A step that verifies one token a request (width 1: plain decoding, the drafter skipped) still owes
the draft KV its committed tokens' target features. Nothing reads them until the drafter runs
again, so they wait here and go in one call (one fused projection and one write per drafter
layer, where each plain step paid its own): before the next drafter forward, before a prefill's
injection (a freed slot may now hold a new prompt, which must be written last), and every
`FLUSH_EVERY` plain steps or B, the block size, whichever is fewer (so what is held stays within
what one whole-block verify captures at that batch size, memory SGLang plans for on an
accelerator). On a CPU, whose memory is not planned to the byte, up to `FLUSH_EVERY_ON_CPU`: each
flush has a fixed cost (a fused projection and a KV write per drafter layer, about a fifth of a
target forward on the tiny pair), which a server decoding plain for most steps paid every 8.
The writes keep program order, so the drafter reads exactly the draft KV an eager injection would
have left (a slot held twice, freed and reused within the window, is written once, the later:
last_write_per_slot); and what the draft KV holds never decides an output token, only which drafts
are proposed.

Off (eager, as before) where KV leaves the device on someone else's schedule: PD disaggregation
and the hierarchical cache.
"""

from __future__ import annotations

import torch
from sglang.srt.runtime_context import get_memory

FLUSH_EVERY = 16  # plain steps held at most (or B, whichever is fewer) on an accelerator
FLUSH_EVERY_ON_CPU = 64  # ... and on a CPU


def held_steps(block_size: int, device=None) -> int:
    """The plain steps held at most before a flush (device None: an accelerator's rule)."""
    if device is not None and torch.device(device).type == "cpu":
        return FLUSH_EVERY_ON_CPU
    return min(FLUSH_EVERY, block_size)


def deferral_off_because(server_args) -> str | None:
    """Why plain steps inject eagerly on this server, or None where they defer."""
    if server_args.disaggregation_mode not in (None, "null"):
        return "PD disaggregation moves the KV"
    if get_memory().enable_hierarchical_cache:
        return "the hierarchical cache copies KV to the host"
    return None


class DeferredContext:
    """The committed features of plain steps, not yet in the draft KV."""

    def __init__(
        self, draft_model, draft_runner, stream, enabled: bool, block_size: int = FLUSH_EVERY, device=None
    ):
        self.draft_model, self.draft_runner = draft_model, draft_runner
        self.stream = stream  # the drafter's (runtime/streams.py): the draft KV is written there
        self.enabled, self.limit = enabled, held_steps(block_size, device)
        self.pending: list[tuple[torch.Tensor, ...]] = []

    def inject(self, hidden, positions, write_ids, lengths, plain: bool, graph_output: bool) -> None:
        """Write the committed prefix (`lengths` a row of `write_ids` [bs, w]) of the step's
        features, or hold them when the step was plain. graph_output: `hidden` lives in a CUDA
        graph's output buffer, which the next replay overwrites."""
        if plain and self.enabled:
            self.pending.append((hidden.clone() if graph_output else hidden, positions, write_ids, lengths))
            if len(self.pending) >= self.limit:
                self.flush()
            return
        self.flush()
        self.write(hidden, positions, write_ids, lengths)

    def flush(self) -> None:
        """Write everything held, in one call."""
        if not self.pending:
            return
        held, self.pending = self.pending, []
        # On the drafter's stream, the held tensors (main's) are read there too: recorded by run().
        with self.stream.run(*(tensor for step in held for tensor in step)):
            if len(held) == 1:
                self.write(*held[0])
                return
            hidden, positions, write_ids, lengths = (torch.cat(part) for part in zip(*held, strict=True))
            self.write(hidden, positions, write_ids, last_write_per_slot(write_ids, lengths))

    def write(self, hidden, positions, write_ids, lengths) -> None:
        # Queued behind acceptance, ahead of the result copies and the next step's planning,
        # which it overlaps on a GPU.
        with self.stream.run(hidden, positions, write_ids, lengths):
            self.draft_model.write_context_kv(
                self.draft_runner.token_to_kv_pool, hidden, positions, write_ids, commit_lens=lengths
            )


def last_write_per_slot(write_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`lengths` with every row but a slot's last written set to 0 (nothing committed).

    Held steps are plain: one slot a row ([n, 1]). A slot freed and handed to another request
    within the deferral window (a request finished, its slots returned without the radix cache,
    or evicted) is held twice, and one write with duplicate indices has no defined winner on a
    GPU (SGLang's prefix-valid write runs its rows in parallel): the later write must win, as it
    would have eagerly. On the device, no host sync: a stable sort by slot, each run's last."""
    slots = write_ids[:, 0]
    order = torch.argsort(slots, stable=True)
    ordered = slots[order]
    last = torch.ones_like(ordered, dtype=torch.bool)
    last[:-1] = ordered[1:] != ordered[:-1]
    keep = torch.empty_like(last)
    keep[order] = last
    return torch.where(keep, lengths, torch.zeros_like(lengths))
