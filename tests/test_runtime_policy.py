"""width/runtime_switch.py without a server: which values a server takes, what each switch does to
the next steps, and SGLang's `/set_internal_state` handlers it adds (the switches on a running
server: tests/server/test_verify_width.py)."""

from types import SimpleNamespace

import pytest
from sglang.srt.managers.scheduler_components.internal_state import UpdateRejected

from dflash_sglang.width import controller
from dflash_sglang.width.controller import ADAPTIVE_ENV, WIDTHS_ENV, VerifyWidth
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, LENGTHS_ENV
from dflash_sglang.width.runtime_switch import LENGTHS, WIDTH, add_handlers, refusal


@pytest.fixture(autouse=True)
def no_switches(monkeypatch):
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    for name in (ADAPTIVE_ENV, LENGTHS_ENV, WIDTHS_ENV, FORCED_LENGTHS_ENV):
        monkeypatch.delenv(name, raising=False)


def adaptive_widths(per_request: bool = True) -> VerifyWidth:
    """A server's widths with the adaptive width on (as on CPU), with or without per-request lengths."""
    return VerifyWidth(8, default_off_because=None, ragged_off_because=None if per_request else "a reason")


def batch(size: int, name: str = "r"):
    reqs = [SimpleNamespace(rid=f"{name}{i}", spec_correct_drafts_histogram=[0] * 8) for i in range(size)]
    return SimpleNamespace(reqs=reqs)


def test_a_server_takes_any_width_and_the_lengths_it_started_with(monkeypatch):
    on = adaptive_widths()
    assert all(refusal(WIDTH, w, on) is None for w in range(9))  # 0: its own policy again
    assert "a width in 1..8" in refusal(WIDTH, 9, on) and "a width in 1..8" in refusal(WIDTH, 2.5, on)
    assert refusal(LENGTHS, 0, on) is None and refusal(LENGTHS, 1.0, on) is None
    assert "expected 0 (off) or 1 (on)" in refusal(LENGTHS, 2, on)
    assert "cannot verify per-request lengths" in refusal(LENGTHS, 1, adaptive_widths(per_request=False))
    monkeypatch.setenv(ADAPTIVE_ENV, "0")
    off = adaptive_widths()
    assert refusal(WIDTH, 4, off) is None and "cannot verify per-request lengths" in refusal(LENGTHS, 1, off)
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: True)
    assert refusal(WIDTH, 8, off) is None and "attention DP" in refusal(WIDTH, 4, off)
    monkeypatch.setattr(controller.dp_attention, "enabled", lambda: False)
    monkeypatch.setenv(WIDTHS_ENV, "8,1")
    assert "forces its widths" in refusal(WIDTH, 8, VerifyWidth(8))


def test_a_fixed_width_neither_chooses_nor_times_nor_learns_and_0_resumes_the_policy():
    widths = adaptive_widths()
    widths.choose(batch(4))
    assert widths.step_started is not None  # chosen and timed
    widths.step_done()
    widths.switch(WIDTH, 8)  # whole blocks
    steps, known = widths.steps, set(widths.acceptance.entries)
    plans = [widths.choose(batch(4, "new")) for _ in range(5)]
    assert [plan.width for plan in plans] == [8] * 5
    assert widths.step_started is None and all(plan.lengths is None for plan in plans)
    assert widths.steps == steps and set(widths.acceptance.entries) == known  # whole blocks: no pairing
    widths.switch(WIDTH, 3)  # narrower than the block: each request's steps paired with width 3
    narrow = batch(4, "narrow")
    assert [widths.choose(narrow).width for _ in range(2)] == [3] * 2
    assert dict(widths.ledger.widths) == {3: 2}
    assert all(list(widths.acceptance.entries[r.rid][2]) == [3, 3] for r in narrow.reqs)
    widths.switch(WIDTH, 0)
    assert widths.ledger.widths == {}  # logged and cleared at the switch
    widths.choose(batch(4))
    assert widths.steps == steps + 1 and widths.step_started is not None  # chosen and timed again


def test_the_lengths_switch_turns_per_request_lengths_off_and_on():
    widths = adaptive_widths()
    assert widths.per_request
    widths.switch(LENGTHS, 0)
    assert not widths.per_request and widths.ledger.fixed_width is None
    widths.switch(LENGTHS, 1)
    assert widths.per_request


def test_sglang_gets_both_handlers_where_our_worker_serves():
    widths = adaptive_widths()
    controller = SimpleNamespace(scheduler=SimpleNamespace(draft_worker=SimpleNamespace(widths=widths)))
    handlers = add_handlers(lambda c: {"theirs": None}, controller)
    assert set(handlers) == {"theirs", WIDTH, LENGTHS}
    with pytest.raises(UpdateRejected, match="expected 0"):
        handlers[LENGTHS].validate(LENGTHS, 3)
    handlers[WIDTH].validate(WIDTH, 8)
    assert handlers[WIDTH].apply(WIDTH, 8) is None  # a worker command, not a server arg
    assert widths.ledger.fixed_width == 8
    other = SimpleNamespace(scheduler=SimpleNamespace(draft_worker=None))  # no-spec, or SGLang's worker
    assert set(add_handlers(lambda c: {"theirs": None}, other)) == {"theirs"}
