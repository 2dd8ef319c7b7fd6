"""A tiny random-weight target + DFlash drafter pair, written in the published on-disk format.

    python -m dflash_sglang_tools.testing.tiny --out DIR [--seed S] [--block-size B] [--hot-tokens N]
                                          [--hybrid] [--swa W]

writes DIR/target (a Qwen3 causal LM: config, safetensors, a locally trained byte-level BPE
tokenizer with a ChatML chat template and a `<|MASK|>` token) and DIR/draft (a DFlash drafter
config and safetensors). `--hybrid`: the target is a Qwen3.5-style hybrid (Gated DeltaNet and full
attention layers, tiny_hybrid.py). `--swa W`: the drafter's layers but the last slide over a window
of W tokens (`layer_types`, `sliding_window`). Nothing is downloaded. Tests, benchmarks and demos
build on it.
"""

from __future__ import annotations

import argparse

from .tiny_dense import TinyShape, sliding_drafter, write_tiny_pair
from .tiny_hybrid import HybridShape, write_tiny_hybrid_pair


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for target/ and draft/")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--hot-tokens", type=int, default=0, help="tokens the target's head favours")
    parser.add_argument("--hybrid", action="store_true", help="Qwen3.5-style hybrid target")
    parser.add_argument("--swa", type=int, metavar="W", help="sliding drafter layers, window W")
    args = parser.parse_args(argv)
    if args.hybrid:
        shape, write = HybridShape(hot_tokens=args.hot_tokens), write_tiny_hybrid_pair
    else:
        shape, write = TinyShape(hot_tokens=args.hot_tokens), write_tiny_pair
    draft_fields = sliding_drafter(shape.draft_layers, args.swa) if args.swa else {}
    pair = write(args.out, args.seed, args.block_size, shape, **draft_fields)
    print(f"target: {pair.target}\ndraft:  {pair.draft}")


if __name__ == "__main__":
    main()
