"""cpu/dp_attention.py: the padded-request fill value for torch_native, and the DP gather's copy
on CPU tensors (against plain slicing); other backends and devices go to SGLang's originals.
cpu/dp_controller.py: the DP controller's non-blocking receive waits on an idle socket only on a
cpu server with --sleep-on-idle, and a message ends the wait."""

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

from dflash_sglang.cpu.dp_attention import memcpy_on_cpu, padded_seq_len_one_for_torch_native


def test_torch_native_pads_with_one_and_others_keep_their_answer():
    native = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)
    assert padded_seq_len_one_for_torch_native(lambda backend: pytest.fail("not torch_native"), native) == 1
    assert padded_seq_len_one_for_torch_native(lambda backend: 0, object()) == 0


@pytest.mark.parametrize("offset_src", [False, True])
def test_the_dp_copy_on_cpu_moves_the_rank_rows(offset_src):
    src, dst = torch.arange(24.0).view(6, 4), torch.zeros(8, 4)
    offset, size = torch.tensor(2), torch.tensor(3)
    memcpy_on_cpu(lambda *a: pytest.fail("the Triton kernel on CPU"), dst, src, 0, offset, size, offset_src)
    want = torch.zeros(8, 4)
    if offset_src:  # src[offset : offset + size] -> dst[0 : size]
        want[0:3] = src[2:5]
    else:  # src[0 : size] -> dst[offset : offset + size]
        want[2:5] = src[0:3]
    assert torch.equal(dst, want)


@pytest.fixture
def socket_pair():
    import zmq

    context = zmq.Context()
    receiver, sender = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    port = receiver.bind_to_random_port("tcp://127.0.0.1")
    sender.connect(f"tcp://127.0.0.1:{port}")
    yield receiver, sender
    receiver.close(0), sender.close(0), context.term()


def nonblocking_receive(socket, flags):
    import zmq

    return socket.recv(flags=flags | zmq.NOBLOCK) if flags & zmq.NOBLOCK else socket.recv()


@pytest.mark.parametrize("device,sleep_on_idle,waits", [("cpu", True, True), ("cpu", False, False),
                                                         ("cuda", True, False)])  # fmt: skip
def test_the_dp_controller_waits_only_on_an_idle_sleeping_cpu_server(
    monkeypatch, socket_pair, device, sleep_on_idle, waits
):
    import time

    import sglang.srt.runtime_context as context
    import zmq

    from dflash_sglang.cpu import dp_controller

    bag = SimpleNamespace(device=device, sleep_on_idle=sleep_on_idle)
    monkeypatch.setattr(context, "get_device", lambda: bag)
    monkeypatch.setattr(dp_controller, "IDLE_WAIT_MS", 300)
    receiver, sender = socket_pair
    start = time.monotonic()
    with pytest.raises(zmq.ZMQError):  # nothing to read: SGLang's loop sees the same error
        dp_controller.receive_waiting_when_idle(nonblocking_receive, receiver, zmq.NOBLOCK)
    assert (time.monotonic() - start >= 0.25) == waits
    if waits:  # a waiting receive returns the message as soon as it is there
        sender.send(b"request")
        start = time.monotonic()
        got = dp_controller.receive_waiting_when_idle(nonblocking_receive, receiver, zmq.NOBLOCK)
        assert got == b"request"
        assert time.monotonic() - start < 0.25
