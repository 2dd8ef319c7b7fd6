"""The operator's view of a hybrid target's recurrent memory under DFLASH, said once at startup.

A linear-attention layer keeps a conv window and an SSM state per mamba slot; a running request
holds up to `slots_per_request` slots (its own, plus the radix strategy's track and ping-pong
slots: SGLang's mamba ratio). Speculation adds scratch per request row: SGLang's verify keeps the
state after every block position (`intermediate_ssm`, D full SSM states) and the conv window
after every position, unless `--enable-linear-replayssm-spec` replaces the states with a ring of
L compact records (update vector, key, decay) a row. Those D states are what made a hybrid slot
cost about 16x under speculation at block 16 (SGLang issues 28730, 36889): the mamba pool then
bounds the running requests long before KV does, silently.

`describe` reads the allocated pool's tensors (not a formula), so what it says is what the server
holds. Bytes a request: state bytes a slot x slots a request + speculative scratch a row.
"""

from __future__ import annotations

import dataclasses
import logging

logger = logging.getLogger(__name__)
KIB = 1024


def _bytes(tensor) -> int:
    if tensor is None:
        return 0
    if isinstance(tensor, (list, tuple)):
        return sum(_bytes(t) for t in tensor)
    if tensor.is_contiguous():  # its own elements (a slice of a larger pool counts only itself)
        return tensor.numel() * tensor.element_size()
    # The deduplicated conv windows are an overlapping as_strided view: the storage it spans.
    return tensor.untyped_storage().nbytes()


@dataclasses.dataclass(frozen=True)
class RecurrentMemory:
    state_per_slot: int  # conv window + SSM state, bytes, one mamba slot
    scratch_per_request: int  # the verify's speculative scratch, bytes, one request row
    slots_per_request: int  # SGLang's mamba ratio for this radix strategy
    mamba_slots: int  # the pool's persistent slots
    running_requests: int  # what the server admits at once (the request pool's rows)
    requested: int  # what --max-running-requests (or SGLang's default) asked for
    scratch_kind: str  # what the verify keeps and why (step/replay_choice.py)
    other_scratch: int = 0  # the same row's scratch on the path not taken, bytes (0: not computed)
    other_kind: str = ""  # that path, in words

    @property
    def per_request(self) -> int:
        return self.state_per_slot * self.slots_per_request + self.scratch_per_request

    @property
    def per_request_without_speculation(self) -> int:
        return self.state_per_slot * self.slots_per_request

    @property
    def requests_the_slots_allow(self) -> int:
        return self.mamba_slots // self.slots_per_request

    @property
    def slots_bound_the_requests(self) -> bool:
        return self.requests_the_slots_allow <= self.running_requests < self.requested

    @property
    def slot_ratio(self) -> float:
        """A request's own slot with its verify scratch, over the slot alone (no speculation)."""
        return (self.state_per_slot + self.scratch_per_request) / max(self.state_per_slot, 1)

    def describe(self) -> str:
        return (
            f"recurrent state of a request slot {_size(self.state_per_slot + self.scratch_per_request)} "
            f"under DFLASH ({_size(self.state_per_slot)} conv + SSM state, {_size(self.scratch_per_request)} "
            f"verify scratch: {self.scratch_kind}), {_size(self.state_per_slot)} without speculation "
            f"({self.slot_ratio:.2f}x); a running request holds {self.slots_per_request} mamba slot(s) "
            f"and its scratch, {_size(self.per_request)} ({_size(self.per_request_without_speculation)} "
            f"without speculation); {self.mamba_slots} mamba slots allow {self.requests_the_slots_allow} "
            f"running requests, the server runs at most {self.running_requests} (asked: {self.requested})"
            + self._the_other_path()
        )

    def _the_other_path(self) -> str:
        if not self.other_scratch:
            return ""
        slot = self.state_per_slot + self.other_scratch
        return (
            f"; with {self.other_kind} a slot would hold {_size(slot)} "
            f"({slot / max(self.state_per_slot, 1):.2f}x no-spec's)"
        )


def _size(count: int) -> str:
    return f"{count / KIB:.1f} KiB" if count < 1024 * KIB else f"{count / KIB / KIB:.2f} MiB"


def _conv_windows(pool):
    """The verify's conv windows after every block position (the physical buffers where SGLang
    keeps an overlapping view over them) and their request rows, or (None, 0)."""
    windows = getattr(pool, "_intermediate_conv_window_phys", None) or getattr(
        pool.mamba_cache, "intermediate_conv_window", None
    )
    if windows is None:
        return None, 0
    return windows, (windows[0] if isinstance(windows, (list, tuple)) else windows).shape[1]


def other_path_scratch(model_runner, ring_on: bool, widest: int, trees: bool) -> tuple[int, str]:
    """A request row's verify scratch on the path not taken, bytes, and its name: both keep the
    conv window after every block position; a state per position adds `widest` SSM states a
    layer, SGLang's ring its compact records (`replayssm_ring_bytes_per_req`, SGLang's count)."""
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.runtime_context import get_exec

    pool = model_runner.req_to_token_pool.mamba_pool
    windows, rows = _conv_windows(pool)
    if windows is None or mambaish_config(model_runner.model_config) is None:
        return 0, ""
    temporal = pool.mamba_cache.temporal  # [layers, slots, HV, V, K]
    window_bytes = _bytes(windows) // rows
    if ring_on:
        states = widest * temporal[0, 0].numel() * temporal.element_size() * temporal.shape[0]
        return window_bytes + states, "a state per tree node" if trees else "a state per block position"
    params = mambaish_config(model_runner.model_config).mamba2_cache_params
    ring = max(get_exec().mamba.linear_replayssm_cache_len, 1 << (widest - 1).bit_length())
    return window_bytes + params.replayssm_ring_bytes_per_req(record_len=ring), "SGLang's ReplaySSM ring"


def measure(model_runner, scratch_kind: str = "") -> RecurrentMemory | None:
    """What the hybrid target's pool holds, or None for a target without recurrent state."""
    pool = getattr(model_runner.req_to_token_pool, "mamba_pool", None)
    if pool is None:
        return None
    cache = pool.mamba_cache
    state = _bytes(cache.conv) + _bytes(cache.temporal)
    rows_field = cache.temporal.shape[1]  # [layers, slots + 1, ...]
    scratch, rows = 0, None
    for field in ("intermediate_ssm", "replayssm_d", "replayssm_k", "replayssm_g", "replayssm_rawv",
                  "replayssm_rawk", "replayssm_beta"):  # fmt: skip
        tensor = getattr(cache, field, None)
        if tensor is not None:
            scratch += _bytes(tensor)
            rows = tensor.shape[1]
    windows, window_rows = _conv_windows(pool)
    if windows is not None:
        scratch += _bytes(windows)
        rows = rows or window_rows
    from sglang.srt.runtime_context import get_schedule

    return RecurrentMemory(
        state_per_slot=state // rows_field,
        scratch_per_request=scratch // rows if rows else 0,
        slots_per_request=_slots_per_request(model_runner),
        mamba_slots=pool.size,
        running_requests=model_runner.req_to_token_pool.size,
        requested=int(get_schedule().max_running_requests or model_runner.req_to_token_pool.size),
        scratch_kind=scratch_kind,
    )


def _slots_per_request(model_runner) -> int:
    configurator = getattr(model_runner, "kv_cache_configurator", None)
    ratio = getattr(configurator, "_calculate_mamba_ratio", None)
    return int(ratio()) if ratio is not None else 1


def report(model_runner, replay_on: bool, scratch_words: str, widest: int = 0, trees: bool = False):
    """Log the recurrent memory a request holds (and would hold on the other path), and warn when
    mamba slots bound the requests. Returns the RecurrentMemory, or None (no recurrent state)."""
    memory = measure(model_runner, scratch_words)
    if memory is None:
        return None
    if widest:
        other, kind = other_path_scratch(model_runner, replay_on, widest, trees)
        memory = dataclasses.replace(memory, other_scratch=other, other_kind=kind)
    logger.info("dflash_sglang: %s", memory.describe())
    if memory.slots_bound_the_requests:
        lift = (
            "--max-mamba-cache-size or --mamba-full-memory-ratio"
            if replay_on
            else "--enable-linear-replayssm-spec (no state per block position: the memory goes to "
            "slots), or --max-mamba-cache-size / --mamba-full-memory-ratio"
        )
        logger.warning(
            "dflash_sglang: mamba slots, not KV, bound the running requests (%d slots / %d a request "
            "= %d); to lift it: %s",
            memory.mamba_slots, memory.slots_per_request, memory.requests_the_slots_allow, lift,
        )  # fmt: skip
    return memory
