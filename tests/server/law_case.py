"""The cases the law tests judge for power (docs/reliability.md). The chain's: the embedded trained
pair at block 4, whose drafts are the target's likely yet uncertain tokens, its most powerful
held-out prompt, and 64 completions a setting; test_worker.py's servers and tests/planted/power.py's
engine-free runs both take it from here, so the detection rates measured in-process are the
server test's. Where no trained drafter exists (a hybrid target), a hot random pair changed so
that every draft is likely yet uncertain (`constant_draft_pair`)."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from dflash_sglang_tools.testing.tiny_dense import HOT_TOKEN_START, TinyPair
from dflash_sglang_tools.train import data
from dflash_sglang_tools.train.tiny_pair import embedded_pair, held_out_prompts

from .law_drafts import ChainDrafter
from .law_matrix import most_powerful
from .pairs import load

BLOCK = 4
COMPLETIONS = 64
FIRST_BLOCKS = 512  # more completions a setting, one block long: law_omnibus.py's shared prefixes


def trained_case():
    """(the pair, the target model, the chain's drafter, the prompt's ids)."""
    pair = embedded_pair()
    tokenizer, target, draft = load(pair.target, pair.draft)
    prompts = [data.prompt_ids(tokenizer, p) for p in held_out_prompts()[:16]]
    return pair, target, ChainDrafter(draft, BLOCK), most_powerful(target, prompts)


def constant_draft_pair(pair: TinyPair, after_save=None) -> TinyPair:
    """A written hot random pair (dense or hybrid), changed for power where no trained drafter
    exists: the target's head row of token 0 copies hot token 10's, so wherever 10 was the
    target's choice, 0 and 10 split it (p near one half each); the drafter's final norm is zero,
    so its logits are all zero and it drafts token 0 everywhere (law_drafts.ConstantDrafter(0, B)):
    likely yet uncertain drafts, accepted about half the time. `after_save(target_dir)` restores
    what transformers drops on save (a hybrid's full_attention_interval)."""
    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32)
    with torch.no_grad():
        target.lm_head.weight[0] = target.lm_head.weight[HOT_TOKEN_START]
    target.save_pretrained(pair.target)
    if after_save is not None:
        after_save(pair.target)
    weights = load_file(str(pair.draft / "model.safetensors"))
    weights["norm.weight"] = torch.zeros_like(weights["norm.weight"])
    save_file(weights, str(pair.draft / "model.safetensors"), metadata={"format": "pt"})
    return pair
