"""The draft window (`--speculative-draft-window-size W`; the seed cards spell it
`--speculative-dflash-draft-window-size`): the drafter sees only the last W committed tokens, and
its KV lives in a ring of W + B slots per request instead of one slot per target token.

    slot(r, p) = 1 + r * (W + B) + p mod (W + B)     r: the request's req_pool index, p: position

Any W + B consecutive positions land in distinct slots, so the window (the W committed positions
before `seq_len`) and the block being drafted (`seq_len` .. `seq_len + B - 1`) never collide, and
the injection after verify overwrites exactly the block's slots. Slot 0 is SGLang's sink: prompt
tokens older than the window are written there and never read. The draft pool is private (its own
request table and KV pool, `max_requests * (W + B) + 1` slots), so the memory is bounded by W.

Each step writes the request's row of the private request table in position order (the window's
slots, then the block's), so the attention backend reads a short contiguous row; RoPE uses the
absolute positions, which the keys were written with.

A request reusing a radix-cached prefix starts its ring at its first uncached token: the drafter
sees the window from there (its draft KV of the cached part belonged to another request's ring).
What the drafter sees only changes its guesses; verify keeps the output exactly the target's.
"""

from __future__ import annotations

import dataclasses

import torch

from ..errors import DFlashConfigError

SINK = 0


class DraftWindow:
    """Built at startup; its private pool comes when SGLang allocates the pools (`allocate`)."""

    def __init__(self, window: int, block_size: int, device):
        self.window, self.block_size, self.device = window, block_size, device
        self.ring = window + block_size
        self.offsets = torch.arange(self.ring, device=device)
        self.max_requests = 0  # request rows, the padding row included: known with the pools
        # The first position each request slot's ring holds (set at the request's first prefill).
        self.start = torch.zeros(0, dtype=torch.int64, device=device)
        self.owner: dict[int, str] = {}  # request slot -> rid whose ring it holds

    def allocate(self, draft_worker, memory_pool_config, req_to_token_pool, allocator) -> None:
        """The draft worker's private request table and KV pool: W + B ring slots per request row."""
        requests = req_to_token_pool.req_to_token.shape[0]  # rows, the padding row included
        tokens = self.pool_tokens(self.window, self.block_size, requests)
        sized = {"max_total_num_tokens": tokens}
        for field in ("full_max_total_num_tokens", "swa_max_total_num_tokens"):
            if getattr(memory_pool_config, field, None) is not None:
                sized[field] = tokens
        # The target's allocator only satisfies SGLang's DFLASH draft setup; ring slots are ours.
        config = dataclasses.replace(memory_pool_config, **sized)
        draft_worker.alloc_memory_pool(memory_pool_config=config, token_to_kv_pool_allocator=allocator)
        own = draft_worker.model_runner.req_to_token_pool.req_to_token
        if own.shape[0] < requests or own.shape[1] < self.ring:
            raise DFlashConfigError(
                f"the draft window's request table is {tuple(own.shape)}, "
                f"need at least ({requests}, {self.ring})"
            )
        self.max_requests = requests
        self.start = torch.zeros(requests, dtype=torch.int64, device=self.device)

    @staticmethod
    def pool_tokens(window: int, block_size: int, max_requests: int) -> int:
        return max_requests * (window + block_size)

    def slots(self, req_pool_indices: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Draft pool slots of `positions` ([bs, n]) of each request ([bs])."""
        return 1 + req_pool_indices.to(torch.int64).unsqueeze(-1) * self.ring + positions % self.ring

    def visible_lens(self, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        """Committed tokens the drafter sees: the last W, none before the ring's start."""
        seq_lens = seq_lens.to(torch.int64)
        first = torch.maximum(seq_lens - self.window, self.start[req_pool_indices])
        return seq_lens - first

    def write_rows(self, req_to_token, req_pool_indices, seq_lens, visible) -> None:
        """Each request's row: slots of positions seq_len - visible .. seq_len + B - 1, in order."""
        positions = (seq_lens.to(torch.int64) - visible).unsqueeze(1) + self.offsets
        rows = self.slots(req_pool_indices, positions).to(req_to_token.dtype)
        req_to_token[req_pool_indices.to(torch.int64).unsqueeze(1), self.offsets] = rows

    def begin_requests(self, batch) -> None:
        """At a prefill: a request slot taken by a new request starts its ring at its first
        uncached token (host bookkeeping only: no device read)."""
        slots, starts = [], []
        for req, prefix in zip(batch.reqs, batch.prefix_lens, strict=True):
            slot = req.kv.req_pool_idx
            if self.owner.get(slot) != req.rid:
                self.owner[slot] = req.rid
                slots.append(slot)
                starts.append(prefix)
        if slots:
            index = torch.tensor(slots, dtype=torch.int64).to(self.start.device, non_blocking=True)
            values = torch.tensor(starts, dtype=torch.int64).to(self.start.device, non_blocking=True)
            self.start[index] = values

    def prefill_slots(self, req_pool_indices, seq_lens, extend_lens, positions, total: int) -> torch.Tensor:
        """Slots for a prefill's tokens ([total], requests back to back): the last W of each
        request's sequence; older ones go to the sink (they would share ring slots)."""

        def per_token(values):
            return torch.repeat_interleave(values.to(torch.int64), extend_lens, output_size=total)

        per_token_req, per_token_len = per_token(req_pool_indices), per_token(seq_lens)
        positions = positions.to(torch.int64)
        slots = 1 + per_token_req * self.ring + positions % self.ring
        return torch.where(positions >= per_token_len - self.window, slots, torch.full_like(slots, SINK))


def refuse_unsupported_setups(server_args, window: int) -> None:
    """Setups the ring cannot serve fail at startup, naming both options.

    Paged attention backends read a request's KV a page at a time from page-aligned slots; the ring
    is neither page-aligned nor read from a page-aligned start. The hierarchical cache backs up and
    restores draft KV by target slot id, and PD disaggregation sends it by target slot id: ring
    slots are not target slot ids."""
    option = f"--speculative-draft-window-size {window}"
    if server_args.page_size is not None and server_args.page_size > 1:
        raise DFlashConfigError(
            f"{option} with --page-size {server_args.page_size}: the draft window's ring is not "
            "page-aligned; use --page-size 1 or no draft window"
        )
    if server_args.enable_hierarchical_cache:
        raise DFlashConfigError(
            f"{option} with --enable-hierarchical-cache: the ring's draft KV cannot be backed up by "
            "target slot id; drop one of the two"
        )
    if server_args.disaggregation_mode not in (None, "null"):
        raise DFlashConfigError(
            f"{option} with --disaggregation-mode {server_args.disaggregation_mode}: the ring's draft "
            "KV cannot be transferred by target slot id; drop the draft window"
        )


def draft_window(window: int | None, block_size: int, device) -> DraftWindow | None:
    """The drafter's ring with --speculative-draft-window-size W, unallocated; None without."""
    return None if window is None else DraftWindow(window, block_size, device)
