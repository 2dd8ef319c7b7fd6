"""Runs a probe script under Triton's interpreter on CPU (`TRITON_INTERPRET=1`, which must be set
before Triton loads, hence a subprocess) and returns the JSON report it prints as its last line.
The probes run SGLang's Triton kernels, or ours, beside the torch paths the CPU servers run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_probe(probe: Path, timeout: float = 300) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(probe)], capture_output=True, text=True, env=env, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
