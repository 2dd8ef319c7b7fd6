"""DrafterStream's ordering protocol. On CPU it is a no-op around the same code; the CUDA side is
checked against a recording stand-in for torch.cuda (a mock: no GPU here), which logs each
stream operation in order."""

from __future__ import annotations

import contextlib

import torch

from dflash_sglang.runtime import streams
from dflash_sglang.runtime.streams import DrafterStream


def test_on_cpu_the_drafter_stream_is_a_no_op_around_the_same_code():
    drafter = DrafterStream("cpu", enabled=True)
    assert not drafter.active
    hidden = torch.ones(3)
    with drafter.run(hidden):
        hidden.mul_(2)
    drafter.join()
    assert hidden.tolist() == [2.0, 2.0, 2.0]


class RecordingCuda:
    """Stands in for torch.cuda: two streams, and a log of who waited on whom."""

    def __init__(self):
        self.log, self.current = [], "main"

    def Stream(self, device):  # noqa: N802 - torch.cuda's name
        return FakeStream("drafter", self)

    def current_stream(self, device=None):
        return FakeStream(self.current, self)

    @contextlib.contextmanager
    def stream(self, stream):
        previous, self.current = self.current, stream.name
        self.log.append(f"enter {stream.name}")
        yield
        self.log.append(f"leave {stream.name}")
        self.current = previous


class FakeStream:
    def __init__(self, name, cuda):
        self.name, self.cuda, self.device = name, cuda, torch.device("cuda", 0)

    def wait_stream(self, other):
        self.cuda.log.append(f"{self.name} waits {other.name}")


class FakeTensor:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def record_stream(self, stream):
        self.log.append(f"{self.name} recorded on {stream.name}")


def test_drafter_work_waits_for_main_records_its_reads_and_main_joins(monkeypatch):
    cuda = RecordingCuda()
    monkeypatch.setattr(streams.torch, "cuda", cuda)
    drafter = DrafterStream("cuda:0", enabled=True)
    assert drafter.active
    with drafter.run(FakeTensor("hidden", cuda.log)):
        cuda.log.append(f"inject on {cuda.current}")
    drafter.join()
    assert cuda.log == [
        "drafter waits main",  # its inputs are main's work so far
        "hidden recorded on drafter",  # main's allocator keeps hidden until the drafter is done
        "enter drafter",
        "inject on drafter",
        "leave drafter",
        "main waits drafter",
    ]


def test_disabled_on_cuda_runs_on_main(monkeypatch):
    cuda = RecordingCuda()
    monkeypatch.setattr(streams.torch, "cuda", cuda)
    drafter = DrafterStream("cuda:0", enabled=False)
    with drafter.run(FakeTensor("hidden", cuda.log)):
        cuda.log.append(f"inject on {cuda.current}")
    drafter.join()
    assert cuda.log == ["inject on main"]


def test_the_env_flag_turns_the_drafter_stream_off(monkeypatch):
    monkeypatch.delenv(streams.ENV_FLAG, raising=False)
    assert streams.drafter_stream_wanted()  # on by default
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv(streams.ENV_FLAG, off)
        assert not streams.drafter_stream_wanted(), off
    monkeypatch.setenv(streams.ENV_FLAG, "1")
    assert streams.drafter_stream_wanted()
