"""KV-pool row moves on CPU.

`MHATokenToKVPool.__init__` warms up a Triton kernel that copies KV rows through raw data
pointers (`copy_all_layer_kv_cache_func`), and later moves go through it too. SGLang already has
a torch twin, `move_kv_cache_native` (per layer buffer: gather the source rows, scatter them to
the targets), selected by the pool's `use_native_move_kv_cache` flag. On a CPU pool we skip the
warm-up and set that flag, so every move takes the torch path.
"""

from __future__ import annotations

import torch

TARGET = "sglang.srt.mem_cache.memory_pool.MHATokenToKVPool._init_kv_copy_and_warmup"


def is_cpu_pool(pool) -> bool:
    return torch.device(pool.device).type == "cpu"


def native_kv_move_on_cpu(original, pool, *args, **kwargs):
    """AROUND _init_kv_copy_and_warmup: a CPU pool moves rows with move_kv_cache_native."""
    if not is_cpu_pool(pool):
        return original(pool, *args, **kwargs)
    pool._kv_copy_config = None
    pool.use_native_move_kv_cache = True
