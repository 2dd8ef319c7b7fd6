"""SGLang's own DFLASH worker on `--device cpu`, made possible by the CPU layer (dflash_sglang.cpu)
alone (DFLASH_SGLANG_WORKER=builtin): a real server on 127.0.0.1 against a no-spec server of the
same target. Greedy outputs must be identical token for token, one prompt at a time, in one
batch, concurrently and on radix-cache hits; and the verify-step counts must equal the
engine-free reference's, which checks the draft stand-ins (non-causal draft attention, float32
block embeddings, KV-slot packing) and not only the lossless verify.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang_tools.testing.server import SGLangServer

from .pairs import reference as run_reference

BLOCK = 8
MAX_NEW = 40
PORTS = range(30100, 30200)
PROMPT_LENGTHS = [1, 3, 7, 8, 9, 16, 31, 70]  # below, at and across block boundaries


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module")
def reference(pair):
    """The engine-free DFlash decoder on the same pair (transformers target, float32)."""
    return lambda input_ids: run_reference(pair, input_ids, MAX_NEW, BLOCK)


@pytest.fixture(scope="module")
def nospec(nospec8):
    return nospec8


@pytest.fixture(scope="module")
def builtin(pair, tmp_path_factory):
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-num-draft-tokens", BLOCK]  # fmt: skip
    with SGLangServer(
        pair.target, args, env={"DFLASH_SGLANG_WORKER": "builtin"}, port_range=PORTS,
        log_dir=tmp_path_factory.mktemp("builtin-log"),
    ) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def prompts():
    # Token ids 10..299: clear of the special tokens (0-3) and inside the 384-token vocabulary.
    return [[10 + (7 * i + 13 * n) % 290 for i in range(n)] for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def expected(nospec, prompts):
    return [nospec.generate(ids, MAX_NEW)["output_ids"] for ids in prompts]


def test_builtin_worker_serves_with_a_torch_native_draft(builtin):
    log = builtin.log_path.read_text()
    assert "Initialized DFLASH draft runner. attention_backend=torch_native" in log
    assert "dflash_sglang.worker" not in log


def test_one_at_a_time_equals_nospec_with_reference_verify_counts(reference, builtin, prompts, expected):
    accepted_blocks = 0
    for ids, want in zip(prompts, expected, strict=True):
        out = builtin.generate(ids, MAX_NEW)
        assert out["output_ids"] == want
        meta = out["meta_info"]
        ref = reference(ids)
        assert ref.tokens == want
        assert meta["spec_verify_ct"] == len(ref.accept_lengths)
        emitted = meta["completion_tokens"] - 1  # the first token comes from the prefill
        assert math.ceil(emitted / BLOCK) <= meta["spec_verify_ct"] <= emitted
        assert 1.0 <= meta["spec_accept_length"] <= BLOCK
        accepted_blocks += max(ref.accept_lengths) > 1
    assert accepted_blocks >= 4  # drafts were accepted, not only rejected


def test_one_batch_equals_nospec(builtin, prompts, expected):
    outs = builtin.generate(prompts, MAX_NEW)
    assert [out["output_ids"] for out in outs] == expected
    assert all(out["meta_info"]["spec_verify_ct"] > 0 for out in outs)


def test_concurrent_requests_equal_nospec(builtin, prompts, expected):
    with ThreadPoolExecutor(len(prompts)) as pool:
        outs = list(pool.map(lambda ids: builtin.generate(ids, MAX_NEW), prompts))
    assert [out["output_ids"] for out in outs] == expected


def test_radix_cache_hits_equal_nospec(builtin, nospec, prompts, expected):
    longest = prompts[-1]
    again = builtin.generate(longest, MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0
    assert again["output_ids"] == expected[-1]
    # A prompt extending a cached one (prompt + part of its output) continues exactly.
    longer = longest + expected[-1][:12]
    out = builtin.generate(longer, MAX_NEW)
    assert out["meta_info"]["cached_tokens"] >= len(longest)
    assert out["output_ids"] == nospec.generate(longer, MAX_NEW)["output_ids"]
