"""The case the chain's law tests judge, for power: the embedded trained pair at block 4, whose
drafts are the target's likely yet uncertain tokens, its most powerful held-out prompt, and 64
completions a setting. test_worker.py's servers and tests/planted/power.py's engine-free runs
both take it from here, so the detection rates measured in-process are the server test's."""

from __future__ import annotations

from dflash_sglang.train import data
from dflash_sglang.train.tiny_pair import embedded_pair, held_out_prompts

from .law_drafts import ChainDrafter
from .law_matrix import most_powerful
from .pairs import load

BLOCK = 4
COMPLETIONS = 64


def trained_case():
    """(the pair, the target model, the chain's drafter, the prompt's ids)."""
    pair = embedded_pair()
    tokenizer, target, draft = load(pair.target, pair.draft)
    prompts = [data.prompt_ids(tokenizer, p) for p in held_out_prompts()[:16]]
    return pair, target, ChainDrafter(draft, BLOCK), most_powerful(target, prompts)
