"""Engine features with our DFLASH workers, in real SGLang servers on CPU (float32, 127.0.0.1):

- weight updates (`/update_weights_from_disk`, `/update_weights_from_tensor`): afterwards the output
  is the new target's own greedy output (transformers on the same checkpoint), as a fresh server
  on the new weights would give; the drafter keeps its own weights (a target checkpoint holds none
  of its tensors);
- `--page-size` 16 and 64: output equal to the shared no-spec server (page size 1);
- `--speculative-draft-kv-cache-dtype fp8_e4m3`: output equal, the drafts stay useful (at least
  half as many drafts accepted as with the float32 draft KV), and sampled requests at
  law_matrix.SETTINGS follow the target's law, controls fail;
- `/release_memory_occupation` then `/resume_memory_occupation`: output equal afterwards.
Two servers: the overlap worker (host-sync check on) at page 16, on which the weights change, and
the plain worker at page 64 with an fp8 draft KV.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from transformers import AutoModelForCausalLM

from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_dense import write_tiny_pair

from .conftest import OVERLAP_CHECKED, PLAIN, SHARED_BLOCK, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import HOT_SHAPE, chat_prompts, load

MAX_NEW = 24


@pytest.fixture(scope="module")
def prompt_ids(pair8):
    tokenizer = load(pair8.target, pair8.draft)[0]
    return [tokenizer(p)["input_ids"] for p in chat_prompts(8)]


@pytest.fixture(scope="module")
def paged16(pair8):
    args = [*dflash_args(pair8, SHARED_BLOCK), "--page-size", 16]
    with SGLangServer(pair8.target, args, env=OVERLAP_CHECKED) as server:
        yield server


@pytest.fixture(scope="module")
def paged64_fp8(pair8):
    args = [*dflash_args(pair8, SHARED_BLOCK), "--page-size", 64,
            "--speculative-draft-kv-cache-dtype", "fp8_e4m3"]  # fmt: skip
    with SGLangServer(pair8.target, args, env=PLAIN) as server:
        yield server


def generate_all(server, prompt_ids) -> list[dict]:
    with ThreadPoolExecutor(len(prompt_ids)) as pool:
        return list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))


def greedy(model_path, prompt_ids) -> list[list[int]]:
    """The checkpoint's own greedy continuation (transformers, float32), without speculation."""
    tokenizer = load(model_path, model_path.parent / "draft")[0]
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    outs = []
    for ids in prompt_ids:
        out = model.generate(
            torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=tokenizer.eos_token_id
        )
        outs.append(out[0, len(ids) :].tolist())
    return outs


def mean_accept_length(responses) -> float:
    return sum(r["meta_info"]["spec_accept_length"] for r in responses) / len(responses)


@pytest.mark.parametrize("fixture", ["paged16", "paged64_fp8"])
def test_paged_servers_equal_nospec(fixture, request, nospec8, prompt_ids):
    server = request.getfixturevalue(fixture)
    want = [r["output_ids"] for r in generate_all(nospec8, prompt_ids)]
    assert [r["output_ids"] for r in generate_all(server, prompt_ids)] == want
    # Again: the prompts now hit the radix cache (whole pages of them).
    assert [r["output_ids"] for r in generate_all(server, prompt_ids)] == want


def test_the_sampled_law_with_real_filters_on_an_fp8_draft_kv(paged64_fp8, pair8, prompt_ids):
    target = load(pair8.target, pair8.draft)[1]
    assert_every_setting_follows_the_law("fp8 draft KV, paged, plain worker", paged64_fp8, target, prompt_ids)


def test_an_fp8_draft_kv_keeps_the_drafts_useful(paged64_fp8, dflash8_plain, prompt_ids):
    fp8 = mean_accept_length(generate_all(paged64_fp8, prompt_ids))
    full = mean_accept_length(generate_all(dflash8_plain, prompt_ids))
    assert full > 1.1, full  # the hot pair's drafts are accepted at all
    assert fp8 - 1 > 0.5 * (full - 1), (fp8, full)  # fp8 keeps at least half the accepted drafts
    assert "fp8_e4m3" in paged64_fp8.log_path.read_text()


@pytest.fixture(scope="module")
def other_target(tmp_path_factory):
    """A target of the same shape and tokenizer with other weights."""
    return write_tiny_pair(tmp_path_factory.mktemp("other"), seed=7, block_size=8, shape=HOT_SHAPE).target


def serialized_weights(model_path) -> tuple[list, str]:
    """The checkpoint's tensors as SGLang's HTTP endpoint takes them (tensors shared by file name;
    the caller keeps them alive until the server has read them)."""
    from sglang.srt.utils import MultiprocessingSerializer

    torch.multiprocessing.set_sharing_strategy("file_system")  # readable by an unrelated process
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    named = [(name, tensor.detach().clone()) for name, tensor in model.state_dict().items()]
    return named, MultiprocessingSerializer.serialize(named, output_str=True)


def test_weight_updates_serve_the_new_target(paged16, pair8, other_target, prompt_ids):
    before = [r["output_ids"] for r in generate_all(paged16, prompt_ids)]
    want_other = greedy(other_target, prompt_ids)
    assert want_other != before  # the update is visible in the output

    reply = paged16.post("/update_weights_from_disk", {"model_path": str(other_target)})
    assert reply["success"], reply
    assert [r["output_ids"] for r in generate_all(paged16, prompt_ids)] == want_other
    assert "weight update: 0 drafter tensors updated" in paged16.log_path.read_text()

    named, payload = serialized_weights(pair8.target)  # back to the first target, from tensors
    # SGLang takes tensors inside a weight-update session (begin, load, end).
    assert paged16.post("/begin_weight_update", {})["success"]
    reply = paged16.post("/update_weights_from_tensor", {"serialized_named_tensors": [payload]})
    assert reply["success"], reply
    assert paged16.post("/end_weight_update", {})["success"]
    del named
    assert [r["output_ids"] for r in generate_all(paged16, prompt_ids)] == before


def test_release_and_resume_memory_occupation(paged64_fp8, nospec8, prompt_ids):
    """Without `--enable-memory-saver` (it preloads a CUDA library) SGLang's release flushes the
    radix cache and stashes the model's static state, and resume restores it: afterwards the server
    serves as before. Before the CPU layer answered `torch.cuda.synchronize` this request killed
    the scheduler, no-spec or not."""
    want = [r["output_ids"] for r in generate_all(nospec8, prompt_ids)]
    assert paged64_fp8.post("/release_memory_occupation", {}) is None
    assert paged64_fp8.post("/resume_memory_occupation", {}) is None
    assert [r["output_ids"] for r in generate_all(paged64_fp8, prompt_ids)] == want
