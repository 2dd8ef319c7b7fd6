"""Block size 16: our worker and SGLang's built-in DFLASH worker (DFLASH_SGLANG_WORKER=builtin,
which keeps only our CPU layer) on the same CPU server setup give identical outputs and identical
per-request verify-step counts, and both equal the engine-free reference.

Our server runs without an overlap flag, so our plain worker under SGLang's synchronous loop; the
built-in one runs under the overlap scheduler (SGLang 0.5.23's default). test_worker.py and
test_overlap.py run our overlap worker."""

from __future__ import annotations

import pytest

from dflash_sglang_tools.testing.server import SGLangServer

from .pairs import chat_prompts, load, make_pair, reference

BLOCK = 16
MAX_NEW = 48


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("pair16"), BLOCK)


def dflash_server(pair, worker: str):
    args = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-num-draft-tokens", BLOCK]  # fmt: skip
    overlap_off = {"SGLANG_ENABLE_SPEC_V2": "", "SGLANG_ENABLE_DFLASH_SPEC_V2": ""}
    return SGLangServer(pair.target, args, env={"DFLASH_SGLANG_WORKER": worker, **overlap_off})


@pytest.fixture(scope="module")
def outputs(pair):
    """Both workers' /generate results for 12 prompts, one at a time then all at once."""
    tokenizer = load(pair.target, pair.draft)[0]
    prompts = [tokenizer(p)["input_ids"] for p in chat_prompts(12)]
    results = {}
    for worker in ("dflash_sglang", "builtin"):
        with dflash_server(pair, worker) as server:
            log = server.log_path
            results[worker] = {
                "alone": [server.generate(ids, MAX_NEW) for ids in prompts],
                "together": server.generate(prompts, MAX_NEW),
                "log": log,
            }
    return prompts, results


def test_each_server_runs_the_worker_it_was_asked_for(outputs):
    _, results = outputs
    ours = results["dflash_sglang"]["log"].read_text()
    assert "served by dflash_sglang.worker.DFlashWorker (synchronous schedule" in ours
    assert "served by dflash_sglang" not in results["builtin"]["log"].read_text()


@pytest.mark.parametrize("mode", ["alone", "together"])
def test_identical_outputs_and_verify_counts(pair, outputs, mode):
    prompts, results = outputs
    ours, builtin = results["dflash_sglang"][mode], results["builtin"][mode]
    for ids, a, b in zip(prompts, ours, builtin, strict=True):
        ref = reference(pair, ids, MAX_NEW, BLOCK)
        assert a["output_ids"] == b["output_ids"] == ref.tokens
        assert a["meta_info"]["spec_verify_ct"] == b["meta_info"]["spec_verify_ct"] == len(ref.accept_lengths)
        assert 1.0 <= a["meta_info"]["spec_accept_length"] <= BLOCK
    assert any(max(reference(pair, ids, MAX_NEW, BLOCK).accept_lengths) > 2 for ids in prompts)
