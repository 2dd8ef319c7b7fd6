"""The request-feature contract: every request a no-spec server answers, our DFLASH workers answer
the same way (token for token at temperature 0, float32), or refuse with a 4xx that names the
feature while the server keeps serving.

Both workers (the session's shared overlap server, every step checked for host syncs, and the
plain one, block 4, whole blocks) against the shared no-spec server under the synchronous loop
(conftest.py); and an overlap server of this module's own under the default policy, as users
launch it (the adaptive width and per-request lengths), whose step record (step_records.py) shows
feature requests verifying lengths of their own, narrower than the block or in a ragged step,
while their answers stay no-spec's. The shared servers stay on whole blocks: on this pair on CPU
the default policy decodes plain on over 90% of the steps, so the tests that share them would
rarely verify a draft.
Logprobs are compared to 1e-4: the verify computes a block of logits in one forward, the no-spec
server one row at a time, which differ in the last float bits.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.admission.request_checks import HIDDEN_STATES_MESSAGE
from dflash_sglang.environment import ADAPTIVE_WIDTH
from dflash_sglang_tools.testing.server import SGLangServer

from .conftest import FEATURE_FLAGS, OVERLAP_CHECKED, SHARED_BLOCK, dflash_args
from .pairs import chat_prompts, load
from .step_records import assert_the_target_saw_what_the_policy_chose, read_steps, record_env

MAX_NEW = 24
LOGPROB_TOLERANCE = 1e-4  # absolute, plus 1e-5 relative (logprobs reach -60)
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["name", "n"],
}


def disallow(token_ids: list[int]) -> tuple[str, dict]:
    """SGLang's own example processor (stateless: the same ban at every position)."""
    from sglang.srt.sampling.custom_logit_processor import DisallowedTokensLogitsProcessor

    processor = DisallowedTokensLogitsProcessor.to_str()
    return generate({"custom_params": {"token_ids": token_ids}}, custom_logit_processor=processor)


def generate(sampling: dict | None = None, **fields) -> tuple[str, dict]:
    params = {"temperature": 0, "max_new_tokens": MAX_NEW, **(sampling or {})}
    return "/generate", {"sampling_params": params, **fields}


def chat(**fields) -> tuple[str, dict]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": chat_prompts(6)[5]}], "temperature": 0}
    return "/v1/chat/completions", {**body, "max_tokens": MAX_NEW, **fields}


# Each case: (path, body). /generate bodies get the prompt's ids added.
CASES = {
    "plain": generate(),
    "frequency_penalty": generate({"frequency_penalty": 1.5}),
    "presence_penalty": generate({"presence_penalty": 1.8, "frequency_penalty": 0.2}),
    "repetition_penalty": generate({"repetition_penalty": 2.0}),
    # Additive penalties only: SGLang's synchronous no-spec loop applies repetition and the additive
    # ones in a set's iteration order, undefined when both are on (sampling/penalties.py).
    "additive_penalties": generate({"frequency_penalty": 1.0, "presence_penalty": 0.8, "min_new_tokens": 3}),
    # The hot token 10 is a stop token here: min_new_tokens bans it until the 9th token.
    "min_new_tokens": generate({"min_new_tokens": 9, "stop_token_ids": [10]}),
    "stop_token_ids": generate({"stop_token_ids": [10]}),
    "logit_bias": generate({"logit_bias": {"10": -4.0, "57": 3.0}}),
    "n_2": generate({"n": 2}),
    "custom_logit_processor": disallow([10, 12]),
    "return_logprob": generate(return_logprob=True),
    "top_logprobs_num": generate(return_logprob=True, top_logprobs_num=3),
    "token_ids_logprob": generate(return_logprob=True, token_ids_logprob=[10, 12, 57]),
    "logprob_start_len": generate(return_logprob=True, logprob_start_len=2, top_logprobs_num=2),
    "logprobs_with_penalties": generate({"frequency_penalty": 1.0}, return_logprob=True, top_logprobs_num=2),
    "json_schema": generate({"json_schema": json.dumps(SCHEMA), "max_new_tokens": 48}),
    "regex": generate({"regex": "(ab|cd)+x[0-9]{2}", "max_new_tokens": 24}),
    "ebnf": generate({"ebnf": 'root ::= ("yes" | "no") " " [a-z]+', "max_new_tokens": 16}),
    "structural_tag": generate(
        {
            "structural_tag": json.dumps(
                {
                    "type": "structural_tag",
                    "structures": [{"begin": "<f>", "schema": SCHEMA, "end": "</f>"}],
                    "triggers": ["<f>"],
                }
            ),
            "max_new_tokens": 32,
        }
    ),
    "return_sampling_mask": generate(return_sampling_mask=True),
    "chat_n_2": chat(n=2),
    "chat_logprobs": chat(logprobs=True, top_logprobs=2),
    "chat_json_schema": chat(
        response_format={"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA}},
        max_tokens=48,
    ),
    "chat_json_object": chat(response_format={"type": "json_object"}, max_tokens=32),
    "chat_logit_bias": chat(logit_bias={"10": -5}),
    "completions_logprobs": (
        "/v1/completions",
        {
            "model": "tiny",
            "prompt": chat_prompts(4)[3],
            "max_tokens": MAX_NEW,
            "temperature": 0,
            "logprobs": 3,
        },
    ),
}
STREAMED = {
    "stream_generate_logprobs": generate(return_logprob=True, top_logprobs_num=2, stream=True),
    "stream_chat_logprobs": chat(logprobs=True, top_logprobs=2, stream=True),
}


@pytest.fixture(scope="module")
def prompt(pair8):
    # Its greedy answer mixes the hot tokens with others; token 10 first comes 7th.
    return load(pair8.target, pair8.draft)[0](chat_prompts(10)[9])["input_ids"]


@pytest.fixture(scope="module", params=["overlap", "plain", "default"])
def dflash(request):
    return request.getfixturevalue(f"dflash8_{request.param}")


@pytest.fixture(scope="module")
def dflash8_default(pair8, tmp_path_factory):
    """The overlap server as users launch it: the adaptive width and per-request lengths (the
    session pins whole blocks; an empty switch reads as unset), every step recorded."""
    steps = tmp_path_factory.mktemp("default_policy_steps")
    env = {**OVERLAP_CHECKED, ADAPTIVE_WIDTH.name: "", **record_env(steps)}
    with SGLangServer(pair8.target, [*dflash_args(pair8, SHARED_BLOCK), *FEATURE_FLAGS], env=env) as server:
        server.steps = steps
        server.warmup_steps = len(read_steps(steps))  # SGLang's warm-up request, before any test's
        yield server


def send(server, path: str, body: dict):
    request = urllib.request.Request(
        f"{server.base_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with DIRECT.open(request, timeout=300) as response:
        if not body.get("stream"):
            return json.loads(response.read())
        chunks = []
        for line in response:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                chunks.append(json.loads(line[5:]))
        return streamed_answer(path, chunks)


def streamed_answer(path: str, chunks: list[dict]) -> dict:
    """What a stream adds up to. A speculative server sends several tokens per chunk, so chunks
    differ in number from a no-spec server's; their sum must not."""
    if path == "/generate":
        return chunks[-1]  # cumulative: text, ids and logprobs so far
    content, logprobs, finish = [], [], None
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            content.append(choice["delta"].get("content") or "")
            logprobs += (choice.get("logprobs") or {}).get("content") or []
            finish = choice.get("finish_reason") or finish
    return {"content": "".join(content), "logprobs": logprobs, "finish_reason": finish}


def comparable(response):
    """What must match: the answer, without timings, ids and speculation statistics."""
    if isinstance(response, list):  # n > 1 on /generate
        return [comparable(r) for r in response]
    if "content" in response:  # a streamed chat, added up
        return response
    if "choices" in response:
        choices = [
            {k: v for k, v in c.items() if k != "matched_stop" or v is not None} for c in response["choices"]
        ]
        return {
            "choices": choices,
            "usage": {k: response.get("usage", {}).get(k) for k in ("completion_tokens",)},
        }
    meta = response.get("meta_info", {})
    kept = {k: v for k, v in meta.items() if k.startswith(("output_", "input_", "finish")) or "logprob" in k}
    return {"text": response.get("text"), "output_ids": response.get("output_ids"), "meta_info": kept}


def assert_same(got, want, where="response", tolerance=LOGPROB_TOLERANCE):
    """Equal, except floats (logprobs) to `tolerance`."""
    if isinstance(want, float) and isinstance(got, float | int):
        assert abs(got - want) <= tolerance + 1e-5 * abs(want), f"{where}: {got} != {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (
            f"{where}: keys {list(got)} != {list(want)}"
        )
        for key in want:
            assert_same(got[key], want[key], f"{where}.{key}", tolerance)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{i}]", tolerance)
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def nospec_answers() -> dict:
    return {}  # case -> the no-spec server's answer, asked once for both workers


@pytest.mark.parametrize("case", [*CASES, *STREAMED])
def test_answers_equal_nospec(case, dflash, nospec8, prompt, nospec_answers):
    path, body = {**CASES, **STREAMED}[case]
    if path == "/generate":
        body = {**body, "input_ids": prompt}
    if case not in nospec_answers:
        nospec_answers[case] = send(nospec8, path, body)
    want = nospec_answers[case]
    got = send(dflash, path, body)
    assert_same(comparable(got), comparable(want))


def test_the_matrix_exercises_what_it_claims(nospec8, prompt):
    """The cases are not vacuous: each changes the no-spec answer or returns its extra fields."""
    plain = send(nospec8, "/generate", {**CASES["plain"][1], "input_ids": prompt})["output_ids"]
    for case in [
        "frequency_penalty",
        "repetition_penalty",
        "additive_penalties",
        "logit_bias",
        "custom_logit_processor",
    ]:
        body = {**CASES[case][1], "input_ids": prompt}
        assert send(nospec8, "/generate", body)["output_ids"] != plain, case
    min_new = send(nospec8, "/generate", {**CASES["min_new_tokens"][1], "input_ids": prompt})
    assert len(min_new["output_ids"]) >= 9 and min_new["meta_info"]["finish_reason"]["type"] == "stop"
    assert 10 in plain[:8]  # so the stop token would have ended it earlier
    assert (
        len(send(nospec8, "/generate", {**CASES["stop_token_ids"][1], "input_ids": prompt})["output_ids"]) < 8
    )
    logprobs = send(nospec8, "/generate", {**CASES["top_logprobs_num"][1], "input_ids": prompt})["meta_info"]
    assert len(logprobs["output_token_logprobs"]) == MAX_NEW and len(logprobs["output_top_logprobs"][3]) == 3
    schema = send(nospec8, "/generate", {**CASES["json_schema"][1], "input_ids": prompt})
    # The tiny target may run out of tokens inside the object: what it wrote follows the schema.
    plain_text = send(nospec8, "/generate", {**CASES["plain"][1], "input_ids": prompt})["text"]
    assert schema["text"].lstrip().startswith("{") and '"name"' in schema["text"], schema["text"]
    assert not plain_text.lstrip().startswith("{")


def test_hidden_states_are_refused_by_name_and_serving_goes_on(dflash, nospec8, prompt):
    path, body = generate(return_hidden_states=True)
    body = {**body, "input_ids": prompt}
    assert send(nospec8, path, body)["meta_info"]["hidden_states"]  # the no-spec server answers
    with pytest.raises(urllib.error.HTTPError) as refused:
        send(dflash, path, body)
    assert 400 <= refused.value.code < 500
    assert HIDDEN_STATES_MESSAGE in refused.value.read().decode()
    plain = {**CASES["plain"][1], "input_ids": prompt}
    assert send(dflash, "/generate", plain)["output_ids"] == send(nospec8, "/generate", plain)["output_ids"]


MIXED = ["additive_penalties", "json_schema", "top_logprobs_num", "plain", "min_new_tokens", "regex"]
# Beside them, requests at temperature 1 whose drafts rarely fit: the policy gives them lengths
# unlike the greedy ones', so the batch verifies ragged (test_verify_width's mixed batch).
SAMPLED = generate({"temperature": 1.0, "ignore_eos": True})
BURSTS = 4  # the policy times and probes before it exploits


def test_mixed_features_in_one_batch(dflash, nospec8, prompt):
    """Penalised, constrained, logprob and plain requests decoded together, each as alone. Under
    the default policy, with sampled requests in the batch, until the step record shows a feature
    request verifying fewer positions than the block or in a ragged step; then every step of the
    module (the matrix's, where it ran, and these) handed the target what the policy chose, with
    per-request lengths on, and drafts were verified and accepted among them (not plain decoding
    alone)."""
    bodies = [{**CASES[c][1], "input_ids": prompt} for c in MIXED]
    want = [comparable(send(nospec8, "/generate", body)) for body in bodies]
    recorded = getattr(dflash, "steps", None)  # the shared servers verify whole blocks, unrecorded
    before = len(read_steps(recorded)) if recorded else 0
    for _ in range(BURSTS if recorded else 1):
        sampled = [{**SAMPLED[1], "input_ids": prompt}] * (4 if recorded else 0)
        together = decode_together(dflash, bodies + sampled)
        for case, got, expected in zip(MIXED, together[: len(MIXED)], want, strict=True):
            assert_same(comparable(got), expected, case)
        if not recorded:
            return
        steps = read_steps(recorded)[before:]
        features = {out["meta_info"]["id"] for out in together[: len(MIXED)]}
        if own_lengths := [step for step in steps if verified_a_length_of_its_own(step, features)]:
            break
    assert own_lengths, f"feature requests verified whole blocks only, in uniform steps ({len(steps)} steps)"
    module = read_steps(recorded)[dflash.warmup_steps :]
    assert_the_target_saw_what_the_policy_chose(module)
    assert all(step["chose"]["per_request"] for step in module)  # the default: per-request lengths on
    assert any(max(step["accepted"]) > 1 for step in module), "no draft accepted under the default policy"


def verified_a_length_of_its_own(step: dict, rids: set) -> bool:
    """One of `rids` verified in a ragged step, or fewer positions than the block."""
    lengths = dict(zip(step["rids"], step["target"]["lengths"], strict=True))
    mine = [lengths[rid] for rid in rids & lengths.keys()]
    return bool(mine) and (step["target"]["layout"] == "ragged" or min(mine) < SHARED_BLOCK)


def decode_together(server, bodies: list[dict]) -> list[dict]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: send(server, "/generate", body), bodies))
