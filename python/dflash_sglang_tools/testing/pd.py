"""A prefill-decode (PD) disaggregated deployment on 127.0.0.1, for tests and demos: a prefill
server, a decode server and SGLang's router (`sglang_router`) in front, the KV moved by Mooncake's
transfer engine over TCP (`mooncake-transfer-engine-non-cuda`, no GPU or RDMA device needed).

    with PDDeployment(model, extra_args=[...dflash args...]) as pd:
        pd.router.generate([5, 6, 7], max_new_tokens=16)

Requests go to the router, which sends each to both servers with a shared bootstrap room, as in
production; the decode server's answer comes back. Every process's log is kept in `log_dir`.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from .server import HOST, SGLangServer, free_port

# Mooncake over TCP on loopback: its RPC and data sockets bind SGLang's host IP.
PD_ENV = {"MOONCAKE_PROTOCOL": "tcp", "MC_FORCE_TCP": "1", "SGLANG_HOST_IP": HOST}


def pd_role_args(role: str, bootstrap_port: int) -> list[str]:
    args = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]
    if role == "prefill":
        args += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    else:  # SGLang's default backup for retracted requests on the decode side is a host pool sized
        # against the memory left after a 10 GiB reserve; under `make test`'s two workers the
        # other worker's servers can leave less than that, and the server refuses to start.
        # Per-request CPU tensors (SGLang's own other backend, the one hybrid targets use) need
        # no reserve.
        args += ["--disaggregation-decode-retraction-backup", "cpu_tensor"]
    return args


class SGLangRouter(SGLangServer):
    """`python -m sglang_router.launch_router --pd-disaggregation` on 127.0.0.1, as a context
    manager; it answers the same HTTP API as a server (/generate, /v1/chat/completions)."""

    health_path = "/readiness"  # /health answers before the router has registered its workers

    def __init__(self, prefill_url: str, bootstrap_port: int, decode_url: str, **kwargs):
        route = ["--pd-disaggregation", "--prefill", prefill_url, str(bootstrap_port), "--decode", decode_url]
        super().__init__("sglang_router", route, base_args=(), **kwargs)

    def command(self) -> list[str]:
        launch = [sys.executable, "-m", "sglang_router.launch_router"]
        # Its metrics listener on a port of its own: the default (29000) is shared by every router,
        # and one that had not yet let go of it failed the next one's start (seen 2026-11-29).
        metrics = ["--prometheus-host", HOST, "--prometheus-port", str(free_port())]
        return [*launch, "--host", HOST, "--port", str(self.port), *metrics, *self.args]


class PDDeployment:
    """Prefill server, decode server and router, started in that order and stopped in reverse."""

    def __init__(self, model_path, extra_args=(), *, env=None, prefill_args=(), decode_args=(), log_dir=None):
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="sglang-pd-"))
        self.bootstrap_port = free_port()
        env = {**PD_ENV, **(env or {})}
        self.prefill = SGLangServer(
            model_path, [*extra_args, *prefill_args, *pd_role_args("prefill", self.bootstrap_port)],
            env=env, log_dir=self.log_dir / "prefill",
        )  # fmt: skip
        self.decode = SGLangServer(
            model_path, [*extra_args, *decode_args, *pd_role_args("decode", self.bootstrap_port)],
            env=env, log_dir=self.log_dir / "decode",
        )  # fmt: skip
        self.router: SGLangRouter | None = None

    def __enter__(self) -> PDDeployment:
        try:
            self.prefill.start()
            self.decode.start()
            route = (self.prefill.base_url, self.bootstrap_port, self.decode.base_url)
            self.router = SGLangRouter(*route, log_dir=self.log_dir / "router").start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for process in (self.router, self.decode, self.prefill):
            if process is not None:
                process.stop()
