"""The worker's interface to SGLang is explicit (worker.py): every name SGLang's scheduler reads on
a spec worker exists on ours, and a name we do not define raises AttributeError instead of reading
the target worker's, as the forwarding `__getattr__` it replaced did."""

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from dflash_sglang.overlap import DFlashOverlapWorker
from dflash_sglang.worker import DFlashWorker

SRT = Path(importlib.util.find_spec("sglang.srt.managers.scheduler").origin).parents[1]
# Where SGLang holds a spec worker: the scheduler's `draft_worker` and `model_worker`.
HOLDERS = ["managers/scheduler.py", "managers/scheduler_pp_mixin.py", "managers/scheduler_components/*.py",
           "disaggregation/*.py"]  # fmt: skip
READ = re.compile(r"\b(?:draft_worker|model_worker)\.([A-Za-z_]\w*)")
HOLDER = r"(?:self\.)?(?:scheduler\.)?(?:draft_worker|model_worker)"
ASKED = re.compile(r"(?:getattr|hasattr)\(\s*" + HOLDER + r",\s*\"(\w+)\"")
# What SGLang reads only on other workers: behind an algorithm check, or by getattr with a default.
NOT_OURS = {
    "dump_info_records", "set_dspark_forced_budget_frac", "clear_info_records",  # DSpark's
    "block_accept_estimate_log_suffix", "get_confidence_budget_prepare",  # DSpark's
    "prepare_for_kv_cache_release",  # MLX workers' (getattr, None by default)
    "speculative_num_steps", "speculative_num_draft_tokens",  # getattr, the spec's values by default
}  # fmt: skip


def names_sglang_reads() -> set[str]:
    names = set()
    for pattern in HOLDERS:
        for path in SRT.glob(pattern):
            text = path.read_text()
            names |= set(READ.findall(text)) | set(ASKED.findall(text))
    return names


def test_every_name_sglang_reads_on_a_spec_worker_exists():
    read = names_sglang_reads()
    assert {"forward_batch_generation", "alloc_memory_pool", "model_runner"} <= read  # the scan works
    assert NOT_OURS <= read, f"no longer read by SGLang: {sorted(NOT_OURS - read)}"
    for worker in (DFlashWorker, DFlashOverlapWorker):
        missing = sorted(name for name in read - NOT_OURS if not hasattr(worker, name))
        assert not missing, f"{worker.__name__} lacks what SGLang reads: {missing}"


def test_a_misspelt_name_raises_instead_of_reading_the_target_workers():
    for worker_class in (DFlashWorker, DFlashOverlapWorker):
        assert not hasattr(worker_class, "__getattr__")
        worker = object.__new__(worker_class)  # a worker's state without SGLang's servers
        worker._target_worker = SimpleNamespace(model_runner="the target's", model_runer="a typo's")
        assert worker.model_runner == "the target's"
        with pytest.raises(AttributeError):
            worker.model_runer  # noqa: B018
