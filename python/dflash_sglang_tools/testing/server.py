"""Run a real SGLang server in a subprocess, for tests and demos.

    with SGLangServer("/tmp/tiny/target", extra_args=["--speculative-algorithm", "DFLASH", ...]) as server:
        server.generate([5, 6, 7], max_new_tokens=16)

The server listens on 127.0.0.1 only, on a free port, with the CPU defaults the tiny models need
(`--device cpu --dtype float32 --attention-backend torch_native`, a small KV pool). Its stdout and
stderr go to a log file that is kept after exit; a server that dies or does not become healthy
in time raises with the log's tail. Leaving the block (or `stop()`) kills the whole process tree.
As a pytest fixture (module or session scope): `with SGLangServer(...) as server: yield server`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

HOST = "127.0.0.1"

CPU_ARGS = (
    "--device", "cpu",
    "--dtype", "float32",
    "--attention-backend", "torch_native",
    "--max-total-tokens", "4096",
    "--mem-fraction-static", "0.5",
    # An idle scheduler otherwise busy-polls a whole core: ruinous for tests on a 2-core machine.
    "--sleep-on-idle",
)  # fmt: skip

# Requests and SGLang's own warm-up must never leave the machine.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# The HTTP port is bound only once the server is up (tens of seconds on CPU), so it must come from
# a range nobody else draws from meanwhile: not the kernel's ephemeral range (gloo's TCP pairs of
# a TP server take ports there) and not 22000-29999, where SGLang picks its NCCL port.
SERVER_PORTS = range(10000, 22000)


def free_port(candidates=None) -> int:
    """A port nothing listens on: the first free one of `candidates`, else a random one of
    SERVER_PORTS."""
    if candidates is None:
        candidates = random.sample(SERVER_PORTS, 64)
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError(f"no free port in {candidates}")


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"<no log: {error}>"


class ServerError(RuntimeError):
    pass


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_all(group: int, tree: list[psutil.Process], signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass
    for proc in tree:  # children that left the group (setsid) still get it
        try:
            proc.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def _running(proc: psutil.Process) -> bool:
    # A zombie has exited; in a container nobody may ever reap an orphaned one.
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(tree: list[psutil.Process], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while any(_running(proc) for proc in tree):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


class SGLangServer:
    """`python -m sglang.launch_server` on 127.0.0.1, as a context manager."""

    health_path = "/health"  # answers 200 once the server serves

    def __init__(
        self,
        model_path,
        extra_args=(),
        *,
        env: dict | None = None,
        base_args=CPU_ARGS,
        port: int | None = None,
        port_range=None,
        timeout: float = 300.0,
        log_dir=None,
    ):
        self.model_path = str(model_path)
        self.args = [*base_args, *map(str, extra_args)]
        self.env = env or {}
        self.timeout = timeout
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="sglang-server-"))
        self.port_range, self.port_is_given = port_range, port is not None
        self._listen_on(port or free_port(port_range))
        self.process: subprocess.Popen | None = None

    def _listen_on(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://{HOST}:{port}"
        self.log_path = self.log_dir / f"server-{port}.log"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "sglang.launch_server",
            "--model-path", self.model_path,
            "--host", HOST,
            "--port", str(self.port),
            *self.args,
        ]  # fmt: skip

    def start(self, bind_attempts: int = 3) -> SGLangServer:
        """Launch and wait until healthy. A port taken between our pick and the server's bind
        (a race no pick can rule out) is retried on another port, unless the caller fixed it."""
        for attempt in range(bind_attempts):
            try:
                return self._start_once()
            except ServerError:
                lost_the_port = "address already in use" in log_tail(self.log_path, lines=20).lower()
                if not lost_the_port or self.port_is_given or attempt == bind_attempts - 1:
                    raise
                taken = self.port
                others = None if self.port_range is None else [p for p in self.port_range if p != taken]
                self._listen_on(free_port(others))
        raise AssertionError("unreachable")

    def _start_once(self) -> SGLangServer:
        env = {**os.environ, "NO_PROXY": HOST, "no_proxy": HOST, "HF_HUB_OFFLINE": "1", **self.env}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            # A session of its own, so stop() can signal the whole group.
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_path.parent,
                start_new_session=True,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(
                    f"SGLang server exited with {self.process.returncode} before becoming healthy; "
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            try:
                with _DIRECT.open(f"{self.base_url}{self.health_path}", timeout=5) as response:
                    if response.status == 200 and self._listens():
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise ServerError(
            f"SGLang server not healthy after {self.timeout:.0f}s; log {self.log_path}:\n"
            f"{log_tail(self.log_path)}"
        )

    def _listens(self) -> bool:
        """Whether the answer came from this server: under `make test`'s two workers another
        server may hold the port while this one is still starting (or dying before it binds)."""
        for proc in _process_tree(self.process.pid):
            try:
                if any(
                    c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                    for c in proc.net_connections()
                ):
                    return True
            except psutil.NoSuchProcess:
                continue
            except psutil.AccessDenied:  # cannot tell: trust the answer, as before
                return True
        return False

    def stop(self, grace: float = 10.0) -> None:
        """Kill the server and every process it started. A test server has nothing to flush, and
        SIGTERM costs about 5 s a server: SGLang's launcher answers its scheduler's exit with a
        pause for crash diagnostics."""
        if self.process is None:
            return
        tree = _process_tree(self.process.pid)
        _signal_all(self.process.pid, tree, signal.SIGKILL)
        _wait_gone(tree, grace)
        self.process.wait(timeout=grace)
        self.process = None

    def __enter__(self) -> SGLangServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def post(self, path: str, payload: dict, timeout: float = 300.0):
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        with _DIRECT.open(request, timeout=timeout) as response:
            return json.loads(response.read())

    def get_text(self, path: str, timeout: float = 60.0) -> str:
        with _DIRECT.open(f"{self.base_url}{path}", timeout=timeout) as response:
            return response.read().decode()

    def generate(self, input_ids, max_new_tokens: int = 32, **sampling) -> dict | list[dict]:
        """Greedy by default; one prompt (list of ids) or a batch (list of lists)."""
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens, **sampling}
        return self.post("/generate", {"input_ids": input_ids, "sampling_params": params})
