"""Target families beyond dense Qwen3 (testing/tiny_families.py: Llama, Qwen3-MoE, gpt-oss,
DeepSeek-V3), each in the model class its real checkpoint loads, in real SGLang servers on CPU
(float32): our worker (block 4; the plain worker on Llama and DeepSeek-V3, the overlap worker with
the host-sync check on Qwen3-MoE and gpt-oss) equals transformers' greedy decoding of the target
token for token, one at a time, concurrently, and on radix-cache hits, and its drafts are
accepted. gpt-oss runs with SGLang's defaults for it (hybrid SWA pool and radix cache) and the CPU
layer's attention sinks; DeepSeek-V3 (MLA) with the CPU layer's MHA-form prefill (cpu/kernels/mla.py). On
Qwen3-MoE the routed experts (`--enable-return-routed-experts`, `return_routed_experts`) of every
prompt and generated token equal a no-spec server's (which also equals transformers): the verify
forward passes them through, the same code for every MoE family. The hybrid MoE family
(Qwen3_5MoeForCausalLM: Gated DeltaNet + attention, experts with a gated shared expert) equals
transformers' greedy decoding, one at a time and concurrently."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_families import FAMILIES, write_tiny_family_pair
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

from . import hybrid
from .conftest import OVERLAP_CHECKED, PLAIN, dflash_args
from .pairs import HOT_SHAPE, chat_prompts, load

MAX_NEW = 32
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}
# The routed experts' reference is a no-spec server; one MoE family carries it.
EXTRA_FLAGS = {"llama": [], "qwen3_moe": ["--enable-return-routed-experts"], "gpt_oss": [], "deepseek_v3": []}
# One server per family, the two workers shared out: the verify forward each family needs is the
# same in both; the overlap worker runs with the host-sync check.
WORKERS = {"llama": "plain", "qwen3_moe": "overlap", "gpt_oss": "overlap", "deepseek_v3": "plain"}


def routed_experts(server, prompts) -> list[str]:
    """Each request's routed experts (base64 of its [tokens, layers, top-k] expert ids)."""
    body = {"sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW}, "return_routed_experts": True}
    return [
        server.post("/generate", {**body, "input_ids": ids})["meta_info"]["routed_experts"] for ids in prompts
    ]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    pair = write_tiny_family_pair(tmp_path_factory.mktemp(request.param), request.param, shape=HOT_SHAPE)
    tokenizer, target, _ = load(pair.target, pair.draft)
    prompts = [tokenizer(p)["input_ids"] for p in chat_prompts(6)]
    want = [transformers_greedy(target, ids, tokenizer.eos_token_id) for ids in prompts]
    flags = EXTRA_FLAGS[request.param]
    if flags:
        with SGLangServer(pair.target, ["--disable-overlap-schedule", *flags]) as nospec:
            assert [nospec.generate(ids, MAX_NEW)["output_ids"] for ids in prompts] == want
            want_routed = routed_experts(nospec, prompts[:3])
    env = OVERLAP_CHECKED if WORKERS[request.param] == "overlap" else PLAIN
    with SGLangServer(pair.target, [*dflash_args(pair, 4), *flags], env=env) as server:
        if flags:  # before the other tests: no radix hits, so every token's routing is computed here
            assert routed_experts(server, prompts[:3]) == want_routed, "routed experts differ from no-spec"
        yield request.param, server, prompts, want, pair


@torch.no_grad()
def transformers_greedy(target, input_ids: list[int], eos_token_id: int) -> list[int]:
    """The target's own decoding through its KV cache, up to MAX_NEW tokens or EOS (included)."""
    out = target(torch.tensor([input_ids]), use_cache=True)
    tokens = []
    while len(tokens) < MAX_NEW and (not tokens or tokens[-1] != eos_token_id):
        tokens.append(int(out.logits[0, -1].argmax()))
        out = target(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    return tokens


def test_the_real_model_class_runs(family):
    name, server, _, _, _ = family
    log = server.log_path.read_text()
    assert ARCHITECTURES[name] in log
    worker = "overlap.DFlashOverlapWorker" if WORKERS[name] == "overlap" else "worker.DFlashWorker"
    assert f"DFLASH served by dflash_sglang.{worker}" in log


def test_alone_concurrent_and_radix_hits_equal_transformers(family):
    _, server, prompts, want, _ = family
    alone = [server.generate(ids, MAX_NEW) for ids in prompts]
    assert [out["output_ids"] for out in alone] == want
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # drafts were accepted
    with ThreadPoolExecutor(len(prompts)) as pool:  # every prompt is cached by now
        together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompts))
    assert [out["output_ids"] for out in together] == want
    assert min(out["meta_info"]["cached_tokens"] for out in together) > 0


def test_hybrid_moe_equals_transformers_alone_and_concurrently(tmp_path):
    """The Qwen3.5-35B-A3B / 397B-A17B family, tiny: 4 experts (top 2) and a gated shared expert
    in every layer. Overlap worker, extra_buffer, block 8; six prompts of 1-130 tokens."""
    shape = HybridShape(hot_tokens=3, experts=4)
    pair = write_tiny_hybrid_pair(tmp_path, seed=0, block_size=hybrid.BLOCK, shape=shape)
    args = [*hybrid.HYBRID_ARGS, *hybrid.EXTRA_BUFFER, *dflash_args(pair, hybrid.BLOCK)]
    env = {**hybrid.HYBRID_ENV, **OVERLAP_CHECKED}
    prompts = hybrid.prompts()
    want = [hybrid.greedy(pair.target, ids, MAX_NEW) for ids in prompts]
    with SGLangServer(pair.target, args, env=env) as server:
        alone = [hybrid.generate(server, ids, MAX_NEW) for ids in prompts]
        with ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(lambda ids: hybrid.generate(server, ids, MAX_NEW), prompts))
        assert "Qwen3_5MoeForCausalLM" in server.log_path.read_text()
    assert [out["output_ids"] for out in alone] == want
    assert [out["output_ids"] for out in together] == want
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1
