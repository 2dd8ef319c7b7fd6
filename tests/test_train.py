"""The training recipe (dflash_sglang_tools.train): anchors, block inputs, labels and loss weights, the
block visibility mask, training-time drafter outputs equal to inference-time ones, and a few
optimizer steps that lower the loss on a fixed batch."""

import dataclasses
import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from dflash_sglang.drafter.context import DraftContextCache
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang_tools.testing.tiny_dense import CORPUS, tiny_draft, write_tiny_pair
from dflash_sglang_tools.train.__main__ import main as train_main
from dflash_sglang_tools.train.blocks import (
    IGNORE,
    block_visibility_mask,
    make_blocks,
    position_weights,
    sample_anchors,
)
from dflash_sglang_tools.train.data import Example, collate, length_buckets, read_jsonl
from dflash_sglang_tools.train.evaluate import acceptance
from dflash_sglang_tools.train.loss import draft_hidden, draft_loss, target_context
from dflash_sglang_tools.train.optim import make_optimizer, optimizer_step, warmup_cosine
from dflash_sglang_tools.train.stdlib_corpus import (
    every_instruction,
    function_pairs,
    is_held_out,
    name_in_words,
    phrased,
)
from dflash_sglang_tools.train.tiny_pair import Plan, build, drafter_instructions

MASK = 511
SOURCE = '''
def add(a, b=1):
    """Add two numbers.

    More text that is not in the summary.
    """
    return a + b

class Box:
    def get(self):
        """Return the content."""
        return self.content

    def nodoc(self):
        return None
'''


def test_position_weights_follow_the_paper():
    w = position_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1
    expected = [1.00, 0.87, 0.75, 0.65, 0.57, 0.49, 0.42, 0.37, 0.32, 0.28, 0.24, 0.21, 0.18, 0.16, 0.14]
    assert torch.allclose(w[1:], torch.tensor(expected), atol=0.006)


def test_anchors_are_response_tokens_with_a_response_token_after():
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0, 0], dtype=torch.bool)
    anchors = sample_anchors(mask, 6, torch.Generator().manual_seed(0))
    assert anchors.tolist() == [3, 4, 5, -1, -1, -1]  # all 3 candidates, sorted, then padding
    few = sample_anchors(mask, 2, torch.Generator().manual_seed(0))
    assert len(few) == 2 and set(few.tolist()) <= {3, 4, 5} and few[0] < few[1]


def test_blocks_inputs_labels_and_weights():
    ids = torch.arange(100, 112).view(1, 12)
    loss_mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0]], dtype=torch.bool)  # 11: padding
    anchors = torch.tensor([[3, 8, -1]])
    blocks = make_blocks(ids, loss_mask, anchors, block_size=4, mask_token_id=MASK, gamma=2.0)
    assert blocks.input_ids.tolist() == [[103] + [MASK] * 3 + [108] + [MASK] * 7]  # padding: all masks
    assert blocks.positions.tolist() == [[3, 4, 5, 6, 8, 9, 10, 11, 0, 1, 2, 3]]
    # position k predicts the token AT anchor + k (not +k+1); no loss past the response or on padding
    assert blocks.labels.tolist() == [[IGNORE, 104, 105, 106, IGNORE, 109, 110, IGNORE] + [IGNORE] * 4]
    w = [0, 1, math.exp(-0.5), math.exp(-1)]
    assert torch.allclose(blocks.weights, torch.tensor([w + w[:3] + [0] + [0] * 4]))


def test_visibility_context_strictly_before_the_anchor_and_only_its_own_block():
    anchors, s, b = torch.tensor([[2, 5, -1]]), 8, 3
    visible = block_visibility_mask(anchors, s, b)[0]
    assert visible.shape == (9, s + 9)
    for q in range(9):
        block = q // b
        anchor = anchors[0, block].item()
        context = visible[q, :s].nonzero().flatten().tolist()
        assert context == list(range(anchor)) if anchor >= 0 else context == []  # not the anchor itself
        blocks = visible[q, s:].nonzero().flatten().tolist()
        assert blocks == list(range(block * b, block * b + b))  # its whole block, both directions


SLIDING = dict(layer_types=("sliding_attention", "full_attention"), sliding_window=3)


@pytest.mark.parametrize("layers", [{}, SLIDING], ids=["full", "sliding"])
def test_training_forward_equals_the_inference_forward(target, layers):
    """Every block of the one-pass training forward equals a separate inference-time draft call
    over the context before its anchor: the mask leaks nothing and hides nothing."""
    draft4 = tiny_draft(target.config, seed=5, block_size=4, mask_token_id=MASK, **layers)
    ids = torch.randint(0, 500, (1, 20), generator=torch.Generator().manual_seed(1))
    anchors = torch.tensor([[4, 5, 11, 17]])
    loss_mask = torch.ones_like(ids, dtype=torch.bool)
    blocks = make_blocks(ids, loss_mask, anchors, 4, MASK, 4.0)
    features = target_context(target, ids, draft4.config.target_layer_ids)
    embeds = target.get_input_embeddings()(blocks.input_ids)
    with torch.no_grad():
        together = draft_hidden(draft4, embeds, blocks, features)
        for i, anchor in enumerate(anchors[0].tolist()):
            cache = DraftContextCache(draft4.config.num_hidden_layers)
            alone = draft4(embeds[:, 4 * i : 4 * i + 4], blocks.positions[:, 4 * i : 4 * i + 4],
                           features[:, :anchor], torch.arange(anchor).view(1, -1), cache)  # fmt: skip
            torch.testing.assert_close(together[:, 4 * i : 4 * i + 4], alone, atol=1e-5, rtol=1e-5)


def test_training_steps_lower_the_loss_on_a_fixed_batch(target):
    torch.manual_seed(0)
    draft = tiny_draft(target.config, seed=7, block_size=4, mask_token_id=MASK)
    draft.train()
    for p in target.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(2)
    examples = [Example(torch.randint(0, 500, (n,), generator=gen).tolist(), [False] * 4 + [True] * (n - 4))
                for n in (24, 30)]  # fmt: skip
    batch = collate(examples, pad_id=0)
    anchors = torch.stack([sample_anchors(m, 16, torch.Generator().manual_seed(0)) for m in batch.loss_mask])
    blocks = make_blocks(batch.input_ids, batch.loss_mask, anchors, 4, MASK, 4.0)
    optimizer, schedule = make_optimizer(draft.parameters(), 3e-3, total_steps=20, warmup_ratio=0.1)
    losses = []
    for _ in range(20):
        out = draft_loss(target, draft, batch.input_ids, blocks)
        losses.append(out.loss.item())
        optimizer_step(out.loss, optimizer, schedule)
    assert out.positions > 0
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.grad is None for p in target.parameters())  # the target stays frozen


def test_warmup_then_cosine():
    f = warmup_cosine(100, 0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.5) and f(99) < 0.01
    assert all(f(t) >= f(t + 1) for t in range(9, 99))


def test_length_buckets_stay_under_the_token_budget():
    examples = [Example([1] * n, [True] * n) for n in (5, 50, 7, 49, 6, 51)]
    groups = length_buckets(examples, tokens_per_batch=100)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert all(len(g) * max(len(examples[i]) for i in g) <= 100 for g in groups)


def test_stdlib_pairs_from_source():
    pairs = function_pairs(SOURCE, "demo")
    assert [p["name"] for p in pairs] == ["add", "Box.get"]
    assert is_held_out(pairs[0]) == is_held_out(json.loads(json.dumps(pairs[0])))
    code = {
        "add": "def add(a, b=1):\n    return a + b\n",
        "Box.get": "def get(self):\n    return self.content\n",
    }
    for pair in pairs:  # the code without its docstring, dedented (a method too); the source with it
        assert pair["code"] == code[pair["name"]]
        assert pair["source"].startswith(code[pair["name"]].split("\n")[0] + '\n    """')
        assert pair["response"] in (pair["source"], pair["summary"])


def test_three_phrasings_ask_for_code_or_read_it():
    code = "def add(a, b=1):\n    return a + b\n"
    source = 'def add(a, b=1):\n    """Add two numbers."""\n    return a + b\n'
    seen = {}
    for i in range(200):
        instruction, response = phrased(f"m.add_{i}", "add(a, b=1)", "Add two numbers.", code, source)
        if instruction.startswith("Write a Python function `add(a, b=1)` that: Add two numbers."):
            seen["specified"] = response == source
        elif instruction.startswith("Explain what this Python function does:") and code in instruction:
            seen["reading"] = response == "Add two numbers." and source not in instruction
        else:
            seen["short"] = response == source and instruction.endswith(("in Python.", "."))
            assert f"add {i}" in instruction  # the name in words
    assert seen == {"specified": True, "short": True, "reading": True}
    assert name_in_words("Parser._parseArgs") == "parse args"
    pair = function_pairs(SOURCE, "demo")[0]  # the drafter's prompts: the function asked every way
    asked = every_instruction(pair)
    assert len(asked) == 3 and pair["instruction"] in asked and any(code in text for text in asked)
    dunder = phrased("__init__", "__init__(self)", "Set up.", code, source)  # no words: specified or read
    assert not dunder[0].startswith(("Write a init", "Implement init", "Write Python code to init"))


def test_cli_trains_a_loadable_drafter(tmp_path):
    pair = write_tiny_pair(tmp_path / "pair", seed=0, block_size=4)
    data = tmp_path / "pairs.jsonl"
    words = CORPUS.split()
    data.write_text("".join(json.dumps({"instruction": " ".join(words[i : i + 5]),
                                        "response": " ".join(words[i + 5 : i + 25])}) + "\n"
                            for i in range(0, 80, 10)))  # fmt: skip
    out = tmp_path / "draft"
    train_main(["--target", str(pair.target), "--out", str(out), "--data", str(data), "--block-size", "4",
                "--epochs", "2", "--anchors", "8", "--eval-prompts", "2", "--eval-max-new-tokens", "8",
                "--device", "cpu"])  # fmt: skip
    draft = DFlashDraftModel.from_pretrained(out)
    assert draft.config.block_size == 4 and draft.config.mask_token_id == 3  # <|MASK|>
    record = json.loads((out / "training.json").read_text())
    # The recorded acceptance is the saved drafter's on the recorded held-out prompts.
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
    eos = target.generation_config.eos_token_id
    again = acceptance(target, draft, record["eval_prompt_ids"], 4, 8, [eos] if isinstance(eos, int) else eos)
    assert len(record["eval_prompt_ids"]) == 2 and again.verify_steps > 0
    assert record["evaluations"][-1]["accept_length"] == round(again.mean, 3)


def test_make_tiny_pair_in_two_stages_writes_a_loadable_pair(tmp_path):
    """`make tiny-pair`'s script at toy scale: the target stage alone, then the drafter stage from
    the saved target, as `--stage target` / `--stage drafter` split a build."""
    plan = Plan(
        vocab_size=400, hidden_size=32, heads=2, kv_heads=1, intermediate_size=64, target_layers=2,
        target_epochs=1, regenerate_max_new_tokens=6, draft_layers=1, draft_intermediate_size=64,
        target_layer_ids=(0,), draft_epochs=1, train_pairs=6, eval_prompts=2, eval_max_new_tokens=4,
    )  # fmt: skip
    assert build(tmp_path, plan, stages=("target",)) is None
    assert (tmp_path / "target" / "model.safetensors").exists() and not (tmp_path / "draft").exists()
    report = build(tmp_path, plan, stages=("drafter",))
    assert set(report["greedy_acceptance_length"]) == {"4", "8", "16"}
    assert report["plan"]["draft_prompts"] == "own_phrasing" and report["minutes"]["target"] >= 0
    assert DFlashDraftModel.from_pretrained(tmp_path / "draft").config.target_layer_ids == (0,)
    assert json.loads((tmp_path / "acceptance.json").read_text())["held_out_prompts"] == len(
        read_jsonl(tmp_path / "held_out.jsonl")
    )
    with pytest.raises(ValueError, match="draft_prompts"):
        drafter_instructions({"instruction": "x"}, dataclasses.replace(plan, draft_prompts="all"))
