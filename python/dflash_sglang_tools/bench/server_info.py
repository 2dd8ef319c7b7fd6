"""What the benchmark asks a server before timing it: its model name, its speculative settings,
a radix-cache flush (so a level never reuses the prompts' KV from the level before), and our
worker's runtime switches (bench/one_process.py)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from .results import ServerRun

# Loopback benchmarks must not go through a proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerUnreachable(RuntimeError):
    pass


def get_json(url: str, timeout: float = 30.0) -> dict:
    with _DIRECT.open(url, timeout=timeout) as response:
        return json.loads(response.read())


def describe(url: str, label: str, model: str | None = None, notes: str = "") -> ServerRun:
    """A ServerRun with no levels yet. Works on any OpenAI-compatible server; SGLang's
    `/server_info` adds the speculative settings."""
    url = url.rstrip("/")
    try:
        models = get_json(f"{url}/v1/models")["data"]
    except (urllib.error.URLError, OSError, KeyError, ValueError) as error:
        raise ServerUnreachable(f"no OpenAI-compatible server at {url} ({error})") from error
    run = ServerRun(label=label, url=url, model=relative(model or models[0]["id"]), notes=notes)
    try:
        info = get_json(f"{url}/server_info")
    except (urllib.error.URLError, OSError, ValueError):
        return run  # not SGLang: no speculation settings to read
    run.algorithm = info.get("speculative_algorithm")
    if run.algorithm:
        run.block_size = info.get("speculative_num_draft_tokens")
        run.draft_model = relative(info.get("speculative_draft_model_path"))
    return run


def relative(path: str | None) -> str | None:
    """A model path under the working directory (the repository, for `make bench`) as a relative
    one, so reports do not carry the paths of the machine that ran them; anything else as given."""
    if not path or not os.path.isabs(path):
        return path
    try:
        inside = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if inside.startswith("..") else inside


def flush_cache(url: str) -> bool:
    """SGLang's /flush_cache; False where the server has none (or refused, e.g. while busy)."""
    try:
        with _DIRECT.open(urllib.request.Request(f"{url}/flush_cache", method="POST"), timeout=60) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def set_internal_state(url: str, switches: dict) -> None:
    """SGLang's /set_internal_state (a running server's switches: dflash_sglang/width/runtime_switch.py);
    raises where any rank did not take them (the server's log says why)."""
    body = json.dumps({"server_args": switches}).encode()
    request = urllib.request.Request(
        f"{url.rstrip('/')}/set_internal_state", data=body, method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with _DIRECT.open(request, timeout=60) as response:
        updated = json.loads(response.read())
    if not updated or not all(updated):
        raise RuntimeError(f"{url}: /set_internal_state refused {switches} (see the server's log)")
