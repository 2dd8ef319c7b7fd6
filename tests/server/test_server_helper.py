"""dflash_sglang_tools.testing.server: a server that dies or never becomes healthy raises with its log,
and leaves no process behind."""

import psutil
import pytest

from dflash_sglang_tools.testing.server import ServerError, SGLangServer, free_port

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


def test_a_port_lost_to_a_race_is_retried_on_another(tmp_path):
    """The bind happens tens of seconds after the pick; losing that race is not the server's
    fault, so start() moves to another port (the launch itself is replaced here: no server runs)."""
    server = SGLangServer(tmp_path / "no-model", port_range=PORTS, log_dir=tmp_path)
    tried = []

    def launch_once():
        tried.append(server.port)
        if len(tried) == 1:
            server.log_path.write_text(
                f"ERROR: [Errno 98] error while attempting to bind on address "
                f"('127.0.0.1', {server.port}): address already in use\n"
            )
            raise ServerError("exited with 1")
        return server

    server._start_once = launch_once
    assert server.start() is server
    assert len(tried) == 2 and tried[0] != tried[1] == server.port
    assert server.base_url.endswith(f":{server.port}") and str(server.port) in server.log_path.name


def test_other_startup_failures_are_not_retried(tmp_path):
    server = SGLangServer(tmp_path / "no-model", port_range=PORTS, log_dir=tmp_path)
    tried = []

    def launch_once():
        tried.append(server.port)
        server.log_path.write_text("ValueError: no such model\n")
        raise ServerError("exited with 1")

    server._start_once = launch_once
    with pytest.raises(ServerError):
        server.start()
    assert len(tried) == 1
