"""Plain steps' context injection, held until the drafter reads (step/deferred_context.py).

The draft KV here is a tensor of slots written by a stand-in drafter whose "projection" is a
fixed linear map (the real one needs SGLang's parallel state); what is checked is the deferral's
bookkeeping: after any sequence of steps and flushes the slots hold exactly what writing every
step at once leaves, in fewer calls, including a slot written twice (a freed slot reused), which
one flush commits once."""

from __future__ import annotations

import contextlib

import torch

from dflash_sglang.runtime.streams import DrafterStream
from dflash_sglang.step.deferred_context import FLUSH_EVERY, FLUSH_EVERY_ON_CPU, DeferredContext

SLOTS, FEATURES = 64, 6


class SlotDrafter:
    """write_context_kv into one tensor of slots: slot s holds W @ features + position."""

    def __init__(self):
        self.weight = torch.randn(FEATURES, 3, generator=torch.Generator().manual_seed(0))
        self.calls = 0
        self.written: list[list[int]] = []  # the slots each call committed

    def write_context_kv(self, pool, features, positions, cache_loc, commit_lens=None):
        self.calls += 1
        values = features @ self.weight + positions.unsqueeze(1).float()
        rows = torch.arange(cache_loc.shape[1]).unsqueeze(0) < commit_lens.unsqueeze(1)
        self.written.append(cache_loc[rows].tolist())
        pool.slots[cache_loc[rows]] = values.view(*cache_loc.shape, -1)[rows]


class Pool:
    def __init__(self):
        self.slots = torch.zeros(SLOTS, 3)


class Runner:
    def __init__(self):
        self.token_to_kv_pool = Pool()


def steps(seed: int, count: int):
    """(features, positions, slots [bs, w], committed lengths, plain) of `count` random steps;
    slots are drawn with repeats across steps, as freed slots are reused."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        bs = int(torch.randint(1, 5, (1,), generator=gen))
        width = 1 if torch.rand(1, generator=gen) < 0.7 else int(torch.randint(2, 5, (1,), generator=gen))
        slots = torch.randint(0, SLOTS, (bs, width), generator=gen)
        lengths = torch.randint(1, width + 1, (bs,), generator=gen)
        features = torch.randn(bs * width, FEATURES, generator=gen)
        positions = torch.randint(0, 100, (bs * width,), generator=gen)
        out.append((features, positions, slots, lengths, width == 1))
    return out


def run(enabled: bool, seed: int, count: int = 60, flush_at=()):
    drafter, runner = SlotDrafter(), Runner()
    context = DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), enabled)
    for k, (features, positions, slots, lengths, plain) in enumerate(steps(seed, count)):
        context.inject(features, positions, slots, lengths, plain, graph_output=False)
        if k in flush_at:  # a drafter forward or a prefill
            context.flush()
    context.flush()
    return runner.token_to_kv_pool.slots, drafter.calls


def expected_calls(seed: int, count: int, flush_at) -> int:
    """One call a drafted step, and one for each run of plain steps a flush ends."""
    calls, held = 0, False
    for k, (*_, plain) in enumerate(steps(seed, count)):
        if not plain:
            calls, held = calls + 1 + held, False
        else:
            held = True
        if k in flush_at:
            calls, held = calls + held, False
    return calls + held


def test_deferred_writes_leave_the_draft_kv_eager_writes_leave_in_fewer_calls():
    flush_at = {7, 8, 30}
    for seed in range(5):
        eager, eager_calls = run(False, seed)
        deferred, deferred_calls = run(True, seed, flush_at=flush_at)
        assert torch.equal(eager, deferred)
        assert eager_calls == 60 and deferred_calls == expected_calls(seed, 60, flush_at) < 45


def test_a_drafted_step_writes_what_the_plain_steps_held_first():
    drafter, runner = SlotDrafter(), Runner()
    context = DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), True)
    one = torch.ones(1, FEATURES)
    slot = torch.tensor([[5]])
    context.inject(one, torch.tensor([0]), slot, torch.tensor([1]), plain=True, graph_output=False)
    assert drafter.calls == 0 and len(context.pending) == 1  # held
    later = torch.full((1, FEATURES), 2.0)
    context.inject(
        later, torch.tensor([1]), slot.expand(1, 1), torch.tensor([1]), plain=False, graph_output=False
    )
    assert drafter.calls == 2 and not context.pending  # the held one first, then the drafted step's
    assert torch.equal(runner.token_to_kv_pool.slots[5], (later @ drafter.weight + 1)[0])


def test_no_more_than_flush_every_plain_steps_or_a_block_are_held():
    drafter, runner = SlotDrafter(), Runner()
    context = DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), True)
    for k in range(3 * FLUSH_EVERY):
        features = torch.randn(2, FEATURES)
        context.inject(
            features, torch.tensor([k, k]), torch.tensor([[k], [k + 1]]), torch.ones(2), True, False
        )
        assert len(context.pending) < FLUSH_EVERY
    assert drafter.calls == 3
    # At a small block, no more than a block's worth of plain steps (one whole-block verify's).
    assert (
        DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), True, block_size=4).limit == 4
    )


def test_a_cpu_server_holds_more_plain_steps_than_an_accelerator():
    """On a CPU (memory not planned to the byte) up to FLUSH_EVERY_ON_CPU steps, whatever the block:
    a flush's fixed cost paid every 8 plain steps was a fifth of a target forward a flush."""
    drafter, runner, stream = SlotDrafter(), Runner(), DrafterStream("cpu", enabled=False)
    assert (
        DeferredContext(drafter, runner, stream, True, block_size=8, device="cpu").limit == FLUSH_EVERY_ON_CPU
    )
    assert DeferredContext(drafter, runner, stream, True, block_size=8, device="cuda").limit == 8
    assert DeferredContext(drafter, runner, stream, True, block_size=32, device="cuda:1").limit == FLUSH_EVERY


def test_a_slot_reused_within_the_deferral_is_written_once_with_its_latest_value():
    """Request A's plain step holds slot 5; A finishes, its slot goes to request C, whose plain step
    holds slot 5 too. One write with a slot twice has no defined winner on a GPU (SGLang's
    prefix-valid write runs rows in parallel): the flush commits slot 5 once, C's."""
    drafter, runner = SlotDrafter(), Runner()
    context = DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), True)
    a_and_b, c = torch.randn(2, FEATURES), torch.randn(1, FEATURES)
    context.inject(a_and_b, torch.tensor([40, 7]), torch.tensor([[5], [6]]), torch.ones(2), True, False)
    context.inject(c, torch.tensor([12]), torch.tensor([[5]]), torch.ones(1), True, False)
    context.flush()
    assert drafter.calls == 1 and sorted(drafter.written[0]) == [5, 6]
    assert torch.equal(runner.token_to_kv_pool.slots[5], (c @ drafter.weight + 12)[0])
    assert torch.equal(runner.token_to_kv_pool.slots[6], (a_and_b[1:] @ drafter.weight + 7)[0])


def test_a_graph_output_is_copied_when_held_the_next_replay_overwrites_it():
    drafter, runner = SlotDrafter(), Runner()
    context = DeferredContext(drafter, runner, DrafterStream("cpu", enabled=False), True)
    buffer = torch.ones(1, FEATURES)
    context.inject(buffer, torch.tensor([0]), torch.tensor([[3]]), torch.tensor([1]), True, graph_output=True)
    buffer.fill_(9.0)  # the next replay
    context.flush()
    assert torch.equal(runner.token_to_kv_pool.slots[3], (torch.ones(1, FEATURES) @ drafter.weight)[0])


class RecordingStream:
    """Stands in for DrafterStream on a GPU: which tensors each run() declared it reads."""

    def __init__(self):
        self.declared: list[int] = []

    @contextlib.contextmanager
    def run(self, *reads):
        self.declared.extend(id(tensor) for tensor in reads)
        yield


def test_the_held_tensors_are_declared_to_the_drafter_stream_that_reads_them():
    """On a GPU the flush concatenates main's tensors on the drafter's stream: each must be
    recorded there (DrafterStream.run), or main's allocator could reuse its memory mid-read."""
    drafter, runner, stream = SlotDrafter(), Runner(), RecordingStream()
    context = DeferredContext(drafter, runner, stream, True)
    held = []
    for k in range(3):
        step = (torch.randn(2, FEATURES), torch.tensor([k, k]), torch.tensor([[k], [k + 9]]), torch.ones(2))
        held.extend(step)
        context.inject(*step, plain=True, graph_output=False)
    assert not stream.declared  # nothing written yet
    context.flush()
    assert {id(tensor) for tensor in held} <= set(stream.declared) and drafter.calls == 1
