"""The tools around the dflash_sglang plugin: nothing here is loaded by a server.

    testing/     tiny models and pairs built in-process, a real SGLang server as a test fixture
    bench/       `make bench`: DFLASH against no-spec and SGLang's built-in, side by side
    train/       the drafter recipe and the embedded tiny pair (`make tiny-pair`)
    soak/        `make soak`: a long mixed load against one server
    gpu_check/   `make gpu-check`: our torch-only code on a GPU (no SGLang there)
    demo.py      `make demo`: one question to a DFLASH server and a no-spec one
    tree_sim.py  the tree budgets' acceptance, simulated engine-free
    step_branches.py  the branches a reader holds on the decode step's path, counted statically

They import the plugin (`dflash_sglang`); the plugin never imports them (tests/test_layout.py).
docs/architecture.md says why they live apart.
"""

from pathlib import Path

import dflash_sglang

# The trained tiny pair shipped inside the plugin (package data: `make serve` needs no download).
EMBEDDED_PAIR = Path(dflash_sglang.__file__).resolve().parent / "assets" / "tiny-pair"
