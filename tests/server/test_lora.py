"""LoRA adapters on the target (`--enable-lora`), the drafter unadapted: our DFLASH server's output
equals a no-spec server's with the same adapter, token for token (float32, temperature 0), with
logprobs to 1e-4, for requests with and without the adapter in one batch; sampled requests with
the adapter at law_matrix.SETTINGS follow the adapted target's law (the adapter merged into the
transformers target: W + alpha / r * B @ A), controls fail.

The adapter is written in the test (testing/tiny_lora.py, random A and B on q_proj and v_proj).
SGLang's LoRA runs on CPU with its torch_native backend once pinned staging buffers are left
unpinned (cpu/platform/no_accelerator.py). SGLang serves LoRA under its synchronous loop only (it turns the
overlap schedule off), so one DFLASH server covers what runs.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from transformers import AutoModelForCausalLM

from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_lora import merge_lora, write_tiny_lora

from .conftest import SHARED_BLOCK, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import chat_prompts, load

ADAPTER = "ad"
MAX_NEW = 24


@pytest.fixture(scope="module")
def adapter(pair8, tmp_path_factory):
    return write_tiny_lora(pair8.target, tmp_path_factory.mktemp("lora") / ADAPTER)


@pytest.fixture(scope="module")
def lora_args(adapter):
    return ["--enable-lora", "--lora-paths", f"{ADAPTER}={adapter}", "--lora-backend", "torch_native",
            "--max-loras-per-batch", 2, "--max-lora-rank", 4,
            "--lora-target-modules", "q_proj", "v_proj"]  # fmt: skip


@pytest.fixture(scope="module")
def nospec_lora(pair8, lora_args):
    with SGLangServer(pair8.target, ["--disable-overlap-schedule", *lora_args]) as server:
        yield server


@pytest.fixture(scope="module")
def dflash_lora(pair8, lora_args):
    with SGLangServer(pair8.target, [*dflash_args(pair8, SHARED_BLOCK), *lora_args]) as server:
        yield server


@pytest.fixture(scope="module")
def requests(pair8) -> list[dict]:
    """Eight prompts, each with and without the adapter, two of them with top logprobs."""
    tokenizer = load(pair8.target, pair8.draft)[0]
    out = []
    for i, prompt in enumerate(chat_prompts(8)):
        for lora in (ADAPTER, None):
            body = {"input_ids": tokenizer(prompt)["input_ids"],
                    "sampling_params": {"temperature": 0.0, "max_new_tokens": MAX_NEW}}  # fmt: skip
            if lora:
                body["lora_path"] = lora
            if i < 2:
                body.update(return_logprob=True, top_logprobs_num=3)
            out.append(body)
    return out


def send_all(server, bodies) -> list[dict]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: server.post("/generate", body), bodies))


def test_lora_changes_the_output_so_the_comparison_is_not_vacuous(nospec_lora, requests):
    answers = send_all(nospec_lora, requests)
    adapted, base = answers[0::2], answers[1::2]
    assert sum(a["output_ids"] != b["output_ids"] for a, b in zip(adapted, base, strict=True)) >= 6


def test_dflash_with_lora_equals_nospec_with_lora(nospec_lora, dflash_lora, requests):
    expected, got = send_all(nospec_lora, requests), send_all(dflash_lora, requests)
    for body, want, have in zip(requests, expected, got, strict=True):
        assert have["output_ids"] == want["output_ids"], body.get("lora_path")
        if body.get("return_logprob"):
            pairs = zip(
                want["meta_info"]["output_token_logprobs"],
                have["meta_info"]["output_token_logprobs"],
                strict=True,
            )
            for want_lp, have_lp in pairs:
                assert have_lp[1] == want_lp[1] and abs(have_lp[0] - want_lp[0]) < 1e-4
            want_top = [[t[1] for t in row] for row in want["meta_info"]["output_top_logprobs"]]
            have_top = [[t[1] for t in row] for row in have["meta_info"]["output_top_logprobs"]]
            assert have_top == want_top
    # Each verify step commits its accepted drafts plus one token; prefill gives the first token.
    verify_steps = [a["meta_info"]["spec_verify_ct"] for a in got]
    accepted = sum(a["meta_info"]["completion_tokens"] - 1 for a in got) - sum(verify_steps)
    assert min(verify_steps) > 0 and accepted > 0, "the speculative path never accepted a draft"


def test_the_sampled_law_with_real_filters_under_the_adapter(pair8, adapter, dflash_lora):
    tokenizer = load(pair8.target, pair8.draft)[0]
    adapted = AutoModelForCausalLM.from_pretrained(pair8.target, dtype=torch.float32).eval()
    merge_lora(adapted, adapter)
    prompts = [tokenizer(p)["input_ids"] for p in chat_prompts(8)]
    law_args = dict(extra={"lora_path": ADAPTER})
    assert_every_setting_follows_the_law("LoRA, plain worker", dflash_lora, adapted, prompts, **law_args)
