"""`make gpu-check`: our drafter, the verify-side math and a Qwen3-8B-shaped target timed on one
CUDA device with torch and transformers only (no SGLang), eager and CUDA-graph replayed; tiny shapes
on a CPU so CI keeps it running (docs/gpu.md).

shapes.py       the published Qwen3-8B / DFlash-b16 shapes; tiny CPU shapes
timing.py       median timings (CUDA events), CUDA-graph capture that reports its failure
draft_step.py   one draft step of DFlashDraftModel on static buffers, checked against its forward
acceptance.py   target_distribution, greedy and rejection acceptance at a full vocabulary
t_positive.py   the T > 0 table: each verify rule at temperature > 0 against one read of the logits
target.py       a transformers Qwen3 target: one decode token, one verify block
markdown.py     the speedup bound and the markdown tables
__main__.py     the command line
"""
