"""SGLang's own argument resolution, as `python -m sglang.launch_server` runs it before it starts
any other process (`load_plugins`, `prepare_server_args`, `resolve_once`), for many command lines
in one interpreter. A setting refused there fails the real launcher the same way, before any model
loads; probing it here costs one import instead of one server start per case."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dflash_sglang_tools.testing.server import CPU_ARGS

PROBE = """
import json, os, sys, traceback
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import prepare_server_args
load_plugins()
results = {}
for name, (argv, env) in json.loads(sys.argv[1]).items():
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        prepare_server_args(argv).resolve_once()
        results[name] = None
    except BaseException as error:  # what the launcher prints before it exits
        results[name] = "".join(traceback.format_exception(error))
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
print("RESULTS " + json.dumps(results))
"""


def resolve(cases: dict[str, tuple[list, dict]], env: dict | None = None) -> dict[str, str | None]:
    """{name: (launch arguments, environment)} -> {name: the error's traceback, or None if the
    arguments resolve}."""
    argvs = {name: ([str(a) for a in argv], case_env) for name, (argv, case_env) in cases.items()}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs)],
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULTS ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS "))


def launch(model_path, *args) -> list:
    """The arguments SGLangServer launches a CPU server with (its host and port aside)."""
    return ["--model-path", model_path, *CPU_ARGS, *args]
