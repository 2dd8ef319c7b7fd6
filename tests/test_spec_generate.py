"""z-lab's transformers usage from the model cards, on the embedded tiny pair: the README snippet's
calls (`draft.spec_generate(input_ids=..., max_new_tokens=..., temperature=..., target=...,
stop_token_ids=[...])`) return the prompt and the target's own greedy continuation in one tensor."""

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from dflash_sglang.drafter.model import DFlashDraftModel
from tests.server.law_matrix import Setting, assert_follows_the_law

PAIR = Path(__file__).resolve().parents[1] / "python" / "dflash_sglang" / "assets" / "tiny-pair"


@pytest.fixture(scope="module")
def models():
    draft = DFlashDraftModel.from_pretrained(PAIR / "draft", dtype=torch.float32, device="cpu").eval()
    target = AutoModelForCausalLM.from_pretrained(PAIR / "target", dtype=torch.float32).eval()
    return draft, target, AutoTokenizer.from_pretrained(PAIR / "target")


def test_the_model_card_snippet(models):
    draft, target, tokenizer = models
    messages = [{"role": "user", "content": "Write a quicksort in Python."}]
    # The card's call, verbatim (transformers 5 returns a dict here; spec_generate takes either).
    input_ids = tokenizer.apply_chat_template(
        messages, return_tensors="pt", add_generation_prompt=True, enable_thinking=False
    ).to(draft.device)
    output = draft.spec_generate(
        input_ids=input_ids, max_new_tokens=64, temperature=0.0, target=target,
        stop_token_ids=[tokenizer.eos_token_id],
    )  # fmt: skip
    input_ids = getattr(input_ids, "input_ids", input_ids)
    assert output.shape[0] == 1 and torch.equal(output[:, : input_ids.shape[1]], input_ids)
    want = target.generate(input_ids, max_new_tokens=64, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    assert output.tolist() == want.tolist()
    assert max(draft.last_accept_lengths) > 1  # the trained drafter's drafts were accepted
    assert isinstance(tokenizer.decode(output[0], skip_special_tokens=False), str)


def test_sampled_spec_generate_and_its_errors(models):
    draft, target, tokenizer = models
    ids = tokenizer("def f(x):", return_tensors="pt")["input_ids"]
    out = draft.spec_generate(input_ids=ids, max_new_tokens=16, temperature=1.0, target=target,
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert out.shape[1] == ids.shape[1] + 16
    # The law: 48 completions of 12 tokens follow the target's at T=1 and fail against T=0.7.
    completions = [
        draft.spec_generate(input_ids=ids, max_new_tokens=12, temperature=1.0, target=target,
                            generator=torch.Generator().manual_seed(seed))[0, ids.shape[1]:].tolist()
        for seed in range(48)
    ]  # fmt: skip
    assert_follows_the_law(
        Setting({"temperature": 1.0}, {"temperature": 0.7}), target, ids[0].tolist(), completions
    )
    with pytest.raises(ValueError, match="target"):
        draft.spec_generate(input_ids=ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="one prompt"):
        draft.spec_generate(input_ids=ids.repeat(2, 1), max_new_tokens=4, target=target)
