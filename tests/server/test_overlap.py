"""The overlap worker (SGLANG_ENABLE_SPEC_V2=1) at block sizes 4 and 16 and the plain worker (no
flag) at 4, in real SGLang servers on CPU, against a no-spec server of the same target: requests that
arrive staggered, ask for different lengths and are aborted mid-way give exactly the no-spec
tokens (an aborted request a prefix of them). The overlap servers check every step for host syncs,
and a planted sync shows that the check catches one. Requests that SGLang retracts (its
SGLANG_TEST_RETRACT switch) resume and still give the no-spec tokens.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import ServerError, SGLangServer

from .conftest import OVERLAP_CHECKED, dflash_args
from .pairs import chat_prompts, load

MAX_TOKENS = [3, 9, 17, 30, 45, 60, 5, 24, 12, 38]  # lengths that end inside and across blocks
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    tokenizer = load(pair8.target, pair8.draft)[0]
    return [tokenizer(p)["input_ids"] for p in chat_prompts(12)]


@pytest.fixture(scope="module")
def nospec_tokens(nospec8):
    @functools.cache
    def tokens(ids: tuple, max_new: int, ignore_eos: bool = False) -> list[int]:
        return nospec8.generate(list(ids), max_new, ignore_eos=ignore_eos)["output_ids"]

    return tokens


@pytest.fixture(
    scope="module",
    # (the plain worker at block 16 runs in test_worker_vs_builtin.py)
    params=[("overlap", 4), ("overlap", 16), ("plain", 4)],
    ids=lambda p: f"{p[0]}-b{p[1]}",
)
def server(request, pair8):
    mode, block = request.param
    if block == 4:  # the session's shared servers (conftest.py)
        yield mode, request.getfixturevalue("dflash8_overlap" if mode == "overlap" else "dflash8_plain")
        return
    with SGLangServer(pair8.target, dflash_args(pair8, block), env=OVERLAP_CHECKED) as s:
        yield mode, s


def test_startup_log_names_the_worker(server):
    mode, s = server
    log = s.log_path.read_text()
    if mode == "overlap":
        assert "served by dflash_sglang.overlap.DFlashOverlapWorker (overlap schedule" in log
        assert "host-sync check on" in log
    else:
        assert "served by dflash_sglang.worker.DFlashWorker (synchronous schedule" in log


def abort(server, rid: str) -> None:
    body = json.dumps({"rid": rid}).encode()
    request = urllib.request.Request(
        f"{server.base_url}/abort_request", body, {"Content-Type": "application/json"}
    )
    assert DIRECT.open(request, timeout=30).status == 200


def stream_generate(server, body: dict, started: threading.Event) -> dict:
    """POST /generate streamed; `started` is set at the first token, so an abort sent after it
    reaches a request SGLang has registered and begun (an earlier one is silently dropped)."""
    request = urllib.request.Request(
        f"{server.base_url}/generate",
        json.dumps({**body, "stream": True}).encode(),
        {"Content-Type": "application/json"},
    )
    last = None
    with DIRECT.open(request, timeout=300) as response:
        for line in response:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                last = json.loads(line[5:])  # output_ids are cumulative (no incremental streaming)
                if last["output_ids"]:
                    started.set()
    return last


# Far more than the test lets it run, yet small enough that SGLang admits every request at once:
# it reserves KV for a running request's remaining max_new_tokens (x0.7), so two requests of
# 3000 in the 4096-token pool kept the others queued until one ended by length.
ENDLESS = 1000


def test_staggered_mixed_length_requests_with_aborts_equal_nospec(server, prompt_ids, nospec_tokens):
    _, s = server
    finished, aborted = {}, {}
    started = {i: threading.Event() for i in (10, 11)}

    def finite(i: int):
        time.sleep(0.2 * i)  # join while others decode, finish at different steps
        finished[i] = s.generate(prompt_ids[i], MAX_TOKENS[i])

    def endless(i: int):
        params = {"temperature": 0, "max_new_tokens": ENDLESS, "ignore_eos": True}
        body = {"input_ids": prompt_ids[i], "rid": f"abort-{i}", "sampling_params": params}
        aborted[i] = stream_generate(s, body, started[i])

    longs = [threading.Thread(target=endless, args=(i,)) for i in (10, 11)]
    for thread in longs:
        thread.start()
    with ThreadPoolExecutor(len(MAX_TOKENS)) as pool:
        waits = [pool.submit(finite, i) for i in range(len(MAX_TOKENS))]
        assert started[10].wait(120)
        abort(s, "abort-10")  # while the staggered requests join and finish
        for wait in waits:
            wait.result()
    assert started[11].wait(120)
    abort(s, "abort-11")  # after the others finished
    for thread in longs:
        thread.join(120)

    for i, out in finished.items():
        assert out["output_ids"] == nospec_tokens(tuple(prompt_ids[i]), MAX_TOKENS[i]), f"request {i}"
    for i in (10, 11):
        out = aborted[i]
        assert out["meta_info"]["finish_reason"]["type"] == "abort", (i, out["meta_info"])
        partial = out["output_ids"]
        assert 0 < len(partial) < ENDLESS
        assert partial == nospec_tokens(tuple(prompt_ids[i]), len(partial), ignore_eos=True)


PLANTED_PLUGIN = '''
"""A second SGLang plugin that plants a host sync in the DFlash step: it reads the accept
lengths on the host right after acceptance (the verify phase's greedy rule calls it)."""
import dflash_sglang.step.verifying as verifying

_accept = verifying.greedy_accept


def accept_then_read_on_host(drafts, target_tokens):
    accepted = _accept(drafts, target_tokens)
    accepted.lengths.tolist()  # the planted sync
    return accepted


def register():
    verifying.greedy_accept = accept_then_read_on_host
'''


def write_planted_plugin(root) -> str:
    """An installed-looking distribution on PYTHONPATH: SGLang's loader finds its entry point."""
    (root / "plant_host_sync.py").write_text(PLANTED_PLUGIN)
    dist = root / "plant_host_sync-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plant-host-sync\nVersion: 0.0\n")
    entry_point = "[sglang.srt.plugins]\nplant_host_sync = plant_host_sync:register\n"
    (dist / "entry_points.txt").write_text(entry_point)
    return str(root)


def test_the_host_sync_check_catches_a_planted_sync(pair8, tmp_path):
    env = {**OVERLAP_CHECKED, "PYTHONPATH": write_planted_plugin(tmp_path)}
    server = SGLangServer(pair8.target, dflash_args(pair8, 4), env=env)
    try:
        with pytest.raises(ServerError):
            server.start()  # SGLang's warm-up request runs DFlash steps: the first one fails
    finally:
        server.stop()
    log = server.log_path.read_text()
    assert "plant_host_sync" in log  # loaded by SGLang's plugin loader
    assert "HostSyncError: tolist() on device data inside a DFlash step" in log
    assert "accepted.lengths.tolist()  # the planted sync" in log  # the traceback points at it


# SGLang's own retraction test switch: every RETRACT_INTERVAL-th forward retracts the decode batch's
# least-advanced request (its KV freed, not cached), which re-queues and prefills its prompt plus
# the tokens generated so far, exactly as under KV pressure.
RETRACT = {**OVERLAP_CHECKED, "SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "4"}


def test_retracted_requests_resume_and_equal_nospec(pair8, prompt_ids, nospec_tokens):
    lengths = [40, 52, 33, 60, 45, 28]
    with SGLangServer(pair8.target, dflash_args(pair8, 4), env=RETRACT) as s:
        with ThreadPoolExecutor(len(lengths)) as pool:
            outs = list(pool.map(s.generate, prompt_ids[: len(lengths)], lengths))
        log = s.log_path.read_text()
    retractions = log.count("Testing retraction. #retracted_reqs: 1")
    assert retractions >= 3, f"only {retractions} retractions: the test did not exercise them"
    for i, (out, n) in enumerate(zip(outs, lengths, strict=True)):
        assert out["meta_info"]["finish_reason"]["type"] == "length", (i, out["meta_info"])
        assert out["output_ids"] == nospec_tokens(tuple(prompt_ids[i]), n), f"request {i}"
