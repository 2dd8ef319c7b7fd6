"""cpu/platform/dp_padding.py: the padded-request fill value for torch_native, and the DP gather's copy
on CPU tensors (against plain slicing); other backends and devices go to SGLang's originals.
cpu/platform/dp_controller.py: the DP controller's non-blocking receive waits on an idle socket only on a
cpu server with --sleep-on-idle, and a message ends the wait."""

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

from dflash_sglang.cpu.platform.dp_padding import memcpy_on_cpu, padded_seq_len_one_for_torch_native


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


def controller_socket(device: str, sleep_on_idle: bool, socket):
    """The socket the controller's loop reads after the hook: SGLang's own loop is replaced by
    one that returns the controller it was given."""
    from sglang.srt.server_args import ServerArgs

    from dflash_sglang.cpu.platform import dp_controller

    args = ServerArgs(model_path="m", device=device, sleep_on_idle=sleep_on_idle)
    controller = SimpleNamespace(server_args=args, recv_from_tokenizer=socket)
    return dp_controller.event_loop_waiting_when_idle(lambda c: c, controller).recv_from_tokenizer


@pytest.mark.parametrize("device,sleep_on_idle,waits", [("cpu", True, True), ("cpu", False, False),
                                                         ("cuda", True, False)])  # fmt: skip
def test_the_dp_controller_waits_only_on_an_idle_sleeping_cpu_server(
    monkeypatch, socket_pair, device, sleep_on_idle, waits
):
    import time

    import zmq
    from sglang.srt.managers.io_struct import sock_recv, sock_send

    from dflash_sglang.cpu.platform import dp_controller

    monkeypatch.setattr(dp_controller, "IDLE_WAIT_MS", 300)
    receiver, sender = socket_pair
    socket = controller_socket(device, sleep_on_idle, receiver)
    assert isinstance(socket, dp_controller.WaitingSocket) == waits
    start = time.monotonic()
    with pytest.raises(zmq.ZMQError):  # nothing to read: SGLang's loop sees the same error
        sock_recv(socket, flags=zmq.NOBLOCK)
    assert (time.monotonic() - start >= 0.25) == waits
    if waits:  # a waiting receive returns the message as soon as it is there
        sock_send(sender, {"request": 1})
        start = time.monotonic()
        assert sock_recv(socket, flags=zmq.NOBLOCK) == {"request": 1}
        assert time.monotonic() - start < 0.25
