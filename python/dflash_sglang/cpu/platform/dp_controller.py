"""The DP controller of a `--device cpu --sleep-on-idle` server waits for requests instead of
spinning.

SGLang's `DataParallelController.event_loop` polls the tokenizer's socket with a non-blocking
receive in a loop that never sleeps: on a GPU host one core spent on it goes unnoticed, but on a
2-core CPU server it takes a core from the ranks themselves (and from everything else), whatever
`--sleep-on-idle` says. On such a server the controller's loop reads that socket through a view
whose non-blocking receive first waits on the socket for up to a second: a request that arrives
ends the wait at once, so dispatch is not delayed, and the loop still comes round (feeding
SGLang's watchdog) every second. Only the controller's own socket is wrapped: `sock_recv` itself
is shared with the schedulers, whose loops must not wait.
"""

from __future__ import annotations

import zmq

TARGET = "sglang.srt.managers.data_parallel_controller.DataParallelController.event_loop"
IDLE_WAIT_MS = 1000


class WaitingSocket:
    """A zmq socket whose non-blocking receives wait up to IDLE_WAIT_MS for a message first."""

    def __init__(self, socket):
        self._socket = socket

    def __getattr__(self, name):
        return getattr(self._socket, name)

    def _wait(self, flags: int) -> None:
        if flags & zmq.NOBLOCK:
            self._socket.poll(IDLE_WAIT_MS, zmq.POLLIN)

    def recv(self, flags: int = 0, *args, **kwargs):
        self._wait(flags)
        return self._socket.recv(flags, *args, **kwargs)

    def recv_pyobj(self, flags: int = 0):
        self._wait(flags)
        return self._socket.recv_pyobj(flags)


def sleeps_on_idle_on_cpu(server_args) -> bool:
    from sglang.srt.arg_groups.overrides import resolving_view

    view = resolving_view(server_args)
    return view.device == "cpu" and bool(view.sleep_on_idle)


def event_loop_waiting_when_idle(original, controller):
    """AROUND DataParallelController.event_loop: on a sleeping cpu server, its socket waits."""
    if sleeps_on_idle_on_cpu(controller.server_args):
        controller.recv_from_tokenizer = WaitingSocket(controller.recv_from_tokenizer)
    return original(controller)
