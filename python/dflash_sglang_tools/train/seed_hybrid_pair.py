"""The seed-shaped hybrid pair: a 16-layer Qwen3.5-style target and a one-layer DFlash drafter.

    python -m dflash_sglang_tools.train.seed_hybrid_pair --out DIR [--stage target|drafter]

The shape of z-lab's Qwen3.5/3.6 drafters (the seeds) at a width one CPU core trains in an hour:
a text-only `Qwen3_5ForCausalLM` of 16 layers (12 Gated DeltaNet, full attention every fourth),
and a drafter of one layer reading five target layers spread by z-lab's rule (1, 4, 7, 10, 13),
block size 16. tiny_hybrid_pair.py's target family and tiny_pair.py's recipe, corpus and tokenizer;
one difference: the drafter reads the target's features computed once (feature_cache.py), since a
16-layer forward a step would cost more than the one drafter layer learns in it.

DIR/target, DIR/draft, DIR/held_out.jsonl and DIR/acceptance.json as tiny_pair.py writes them
(python/dflash_sglang/assets/seed-hybrid-pair, `make seed-hybrid-pair`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dflash_sglang_tools import EMBEDDED_PAIR

from ..testing.tiny_dense import TinyPair
from . import tiny_hybrid_pair
from .tiny_hybrid_pair import HybridPlan

EMBEDDED_SEED = EMBEDDED_PAIR.parent / "seed-hybrid-pair"


@dataclasses.dataclass(frozen=True)
class SeedPlan(HybridPlan):
    target_layers: int = 16  # layers 3, 7, 11 and 15 full attention, the rest Gated DeltaNet
    target_epochs: int = 2  # 3 s a step (96 an epoch) on one core; the drafter's steps weigh more
    # Greedy responses of a tiny target loop to the cap, and a drafter falls off past the lengths
    # it trained on: at 128 new tokens the cards' 512-token demo fell from 15.4 tokens a step over
    # its first 128 to 2.8 over all 512. So a quarter of the prompts (a 16-layer target decodes 6x
    # slower than the 4-layer one), answered to 512 tokens, 128 anchors a sequence.
    regenerate_max_new_tokens: int = 512
    draft_pairs: int | None = 816
    draft_layers: int = 1
    target_layer_ids: tuple[int, ...] = (1, 4, 7, 10, 13)  # default_target_layer_ids(16, 5)
    block_size: int = 16  # as the seeds ("-b16"); the acceptance bar is measured at it
    train_block_sizes: tuple[int, ...] = (8, 16)
    anchors: int = 128  # at block 16, over answers of up to 512 tokens
    draft_epochs: int = 8
    draft_eval_every: int = 250  # each evaluation verifies through the 16-layer target
    cache_target_features: bool = True


def embedded_seed_pair(root: Path = EMBEDDED_SEED) -> TinyPair:
    """The seed-shaped pair shipped with the package (python/dflash_sglang/assets/seed-hybrid-pair)."""
    return TinyPair(root / "target", root / "draft")


def main(argv=None) -> None:
    tiny_hybrid_pair.main(argv, SeedPlan(), __doc__)


if __name__ == "__main__":
    main()
