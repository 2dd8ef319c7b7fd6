"""The DP controller of a `--device cpu --sleep-on-idle` server waits for requests instead of
spinning.

SGLang's `DataParallelController.event_loop` polls the tokenizer's socket with a non-blocking
receive in a loop that never sleeps: on a GPU host one core spent on it goes unnoticed, but on a
2-core CPU server it takes a core from the ranks themselves (and from everything else), whatever
`--sleep-on-idle` says. On such a server the controller's non-blocking receive first waits on the
socket for up to a second: a request that arrives ends the wait at once, so dispatch is not
delayed, and the loop still comes round (feeding SGLang's watchdog) every second.
"""

from __future__ import annotations

import zmq

TARGET = "sglang.srt.managers.data_parallel_controller.sock_recv"
IDLE_WAIT_MS = 1000


def sleeps_on_idle_on_cpu() -> bool:
    from sglang.srt.runtime_context import get_device

    device = get_device()
    return device.device == "cpu" and bool(device.sleep_on_idle)


def receive_waiting_when_idle(original, socket, flags: int = 0):
    """AROUND the controller's sock_recv: a non-blocking receive waits for a message first."""
    if flags & zmq.NOBLOCK and sleeps_on_idle_on_cpu():
        socket.poll(IDLE_WAIT_MS, zmq.POLLIN)
    return original(socket, flags)
