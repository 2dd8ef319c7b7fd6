"""Tensor parallelism on CPU over gloo (cpu/platform/collectives.py), the TP draft argmax and rank 0's
acceptance on every rank (step/tp_agreement.py): two real ranks (tp_probe.py) build SGLang's own TP
group and run its collectives against plain torch references."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dflash_sglang.cpu.platform.collectives import all_gather_into_tensor_on_cpu, group_without_pynccl_on_cpu
from dflash_sglang_tools.testing.server import free_port


@pytest.fixture(scope="module")
def ranks():
    probe, port = Path(__file__).with_name("tp_probe.py"), free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    procs = [
        subprocess.Popen([sys.executable, str(probe), str(rank), str(port)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for rank in range(2)
    ]  # fmt: skip
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-4000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_sglang_needs_the_stand_ins_on_cpu(ranks):
    for report in ranks:
        assert report["group_before"] == "Expected a cuda device, but got: cpu"
        assert report["all_gather_before"] == "no CPU kernel"


def test_tp_group_builds_without_pynccl_and_gathers_on_cpu(ranks):
    for report in ranks:
        assert report["pynccl"] is False
        assert report["all_gather_into_tensor"] == [0.0, 1.0, 2.0, 10.0, 11.0, 12.0]  # cat of the ranks'


def test_vocab_parallel_argmax_equals_the_full_argmax(ranks):
    for report in ranks:
        assert report["argmax"] == report["argmax_reference"]
        assert report["tie"] == report["tie_reference"] == [3]  # the lower id, as torch.argmax


def test_every_rank_commits_rank_zeros_acceptance(ranks):
    rank0 = [[1, 2], [[5, 6, 7], [8, 9, 10]]]  # rank 1 decided [2, 2] and a different last token
    for report in ranks:
        assert report["agreed_greedy_True"] == report["agreed_greedy_False"] == rank0
        assert report["first_tokens"] == [100]


def test_pynccl_stays_on_for_other_backends_and_devices():
    calls = []

    def original(*args, **kwargs):
        calls.append((args, kwargs))

    group_without_pynccl_on_cpu(original, [[0, 1]], 0, "nccl")
    group_without_pynccl_on_cpu(original, [[0, 1]], 0, "gloo", True)
    assert calls[0] == (([[0, 1]], 0, "nccl"), {})
    # gloo on this GPU-less host: the CPU device, so PyNccl goes off, also when passed positionally.
    assert calls[1] == (([[0, 1]], 0, "gloo", False), {})


def test_all_gather_off_cpu_goes_to_sglang():
    calls = []
    output, local = torch.empty(4, device="meta"), torch.empty(2, device="meta")
    all_gather_into_tensor_on_cpu(lambda *args: calls.append(args), "group", output, local)
    assert calls == [("group", output, local)]
