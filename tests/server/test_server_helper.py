"""dflash_sglang.testing.server: a server that dies or never becomes healthy raises with its log,
and leaves no process behind."""

import psutil
import pytest

from dflash_sglang.testing.server import ServerError, SGLangServer, free_port

PORTS = range(30100, 30200)


def test_free_port_skips_a_port_in_use():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        assert free_port([taken, *PORTS]) != taken


def test_a_server_that_dies_raises_with_its_log_tail(tmp_path):
    server = SGLangServer(tmp_path / "no-model", ["--no-such-flag"], port_range=PORTS, log_dir=tmp_path)
    with pytest.raises(ServerError, match="exited with") as error:
        server.start()
    assert "--no-such-flag" in str(error.value)  # argparse's complaint, from the log
    assert server.log_path.is_file()
    assert server.process is None


def test_a_server_not_healthy_in_time_is_killed(tmp_path):
    server = SGLangServer(tmp_path / "no-model", port_range=PORTS, timeout=3, log_dir=tmp_path)
    started = []
    original_wait = server._wait_healthy

    def wait_and_record():
        started.append(server.process.pid)
        original_wait()

    server._wait_healthy = wait_and_record
    with pytest.raises(ServerError, match="not healthy after 3s"):
        server.start()
    assert started and server.process is None
    assert not psutil.pid_exists(started[0]) or psutil.Process(started[0]).status() == psutil.STATUS_ZOMBIE
