"""The draft window (`--speculative-dflash-draft-window-size W`, step/draft_window.py) in real SGLang
servers on CPU: the drafter sees only the last W committed tokens and keeps its KV in a ring of
W + B slots per request. Prompts and outputs far longer than the window, alone, concurrent and
through a radix-cache hit, give exactly the no-spec server's tokens; the draft KV pool is sized by
the window, not by the target's pool; sampled requests at law_matrix.SETTINGS (temperatures,
filters, a penalty) run past the window and follow the target's law, controls fail. Plain worker
with a full-attention drafter, overlap worker (host-sync check on) with a sliding-window drafter
and verify widths forced through a cycle (so the adaptive width is the default with a window too).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_dense import sliding_drafter, write_tiny_pair

from .law_matrix import assert_every_setting_follows_the_law
from .pairs import HOT_SHAPE, chat_prompts, load

MAX_NEW = 48
CASES = {
    # name: (env, window, block, sliding drafter window or None)
    "plain-full-drafter-w16-b8": ({"SGLANG_ENABLE_SPEC_V2": ""}, 16, 8, None),
    # Widths forced through the block, plain decoding and partial blocks, step by step: the ring
    # advances by what each step commits, whatever it verified.
    "overlap-sliding-drafter-w12-b4-widths": (
        {"SGLANG_ENABLE_SPEC_V2": "1", "DFLASH_SGLANG_CHECK_HOST_SYNC": "1",
         "DFLASH_SGLANG_VERIFY_WIDTHS": "4,1,2,4,3"}, 12, 4, 6),
}  # fmt: skip


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    tokenizer = load(pair8.target, pair8.draft)[0]
    return [tokenizer(p)["input_ids"] for p in chat_prompts(10)[3:]]  # 14-31 tokens


@pytest.fixture(scope="module", params=list(CASES))
def windowed(request, pair8, tmp_path_factory):
    env, window, block, sliding = CASES[request.param]
    if sliding is None:
        draft = pair8.draft
    else:  # same seed and shape as pair8: the same target, a drafter with sliding layers
        layers = sliding_drafter(HOT_SHAPE.draft_layers, sliding)
        draft = write_tiny_pair(tmp_path_factory.mktemp("sliding"), 0, block, HOT_SHAPE, **layers).draft
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
            "--speculative-num-draft-tokens", block,
            "--speculative-dflash-draft-window-size", window]  # fmt: skip
    with SGLangServer(pair8.target, args, env=env) as server:
        server.kind = request.param
        yield server, window, block


def test_outputs_longer_than_the_window_equal_nospec(windowed, nospec8, prompt_ids):
    server, window, _ = windowed
    expected = [nospec8.generate(ids, MAX_NEW)["output_ids"] for ids in prompt_ids]
    assert all(len(ids) + len(out) > 2 * window for ids, out in zip(prompt_ids, expected, strict=True))
    alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids]
    assert [out["output_ids"] for out in alone] == expected
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # drafts were accepted
    with ThreadPoolExecutor(len(prompt_ids)) as pool:
        together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in together] == expected


def test_a_radix_hit_starts_the_ring_after_the_cached_prefix(windowed, nospec8, prompt_ids):
    server, _, _ = windowed
    first = server.generate(prompt_ids[-1], MAX_NEW)
    longer = prompt_ids[-1] + first["output_ids"] + prompt_ids[0]
    out = server.generate(longer, MAX_NEW)
    assert out["meta_info"]["cached_tokens"] > len(prompt_ids[-1])  # the hit
    assert out["output_ids"] == nospec8.generate(longer, MAX_NEW)["output_ids"]


def test_the_draft_pool_is_sized_by_the_window(windowed):
    server, window, block = windowed
    log = server.log_path.read_text()
    found = re.search(r"draft window (\d+): draft KV pool of (\d+) slots \((\d+) requests x (\d+)\), "
                      r"target pool (\d+)", log)  # fmt: skip
    assert found, log[-3000:]
    logged_window, slots, requests, ring, target_pool = map(int, found.groups())
    assert (logged_window, ring) == (window, window + block)
    assert slots == requests * ring < target_pool


def test_the_sampled_law_with_real_filters_past_the_window(windowed, pair8, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch; prompt + 24 new tokens run past W + B."""
    server = windowed[0]
    path = {
        "plain-full-drafter-w16-b8": "draft window, plain worker",
        "overlap-sliding-drafter-w12-b4-widths": "draft window, sliding drafter, overlap worker, width cycle",
    }[server.kind]
    assert_every_setting_follows_the_law(path, server, load(pair8.target, pair8.draft)[1], prompt_ids)
