"""Test fixtures that ship with the package, so tests, benchmarks and demos need no downloads.

    tiny.py           python -m dflash_sglang_tools.testing.tiny: write a tiny pair (--hybrid, --swa W)
    tiny_dense.py     a tiny Qwen3 target + DFlash drafter in the published on-disk format
    tiny_hybrid.py    a tiny Qwen3.5-style hybrid (Gated DeltaNet) target, dense or MoE
    tiny_families.py  Llama, Qwen3-MoE, gpt-oss and DeepSeek-V3 style tiny targets
    tiny_lora.py      a PEFT LoRA adapter for a tiny target
    tiny_variants.py  drafter variants (DFlash2, Domino, Laguna, sinks, convolutions) on a tiny pair
    server.py         a real SGLang server in a subprocess, on loopback, with its log kept
    pd.py             a prefill + decode + router deployment (Mooncake over TCP)

May import the library (drafter/ for the drafter it writes); the library never imports it.
"""
