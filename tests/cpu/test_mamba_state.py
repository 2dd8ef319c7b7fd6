"""The mamba-pool row copies (cpu/kernels/mamba_state.py) against loops written from the Triton kernels'
semantics: the verify commit `pool[:, dst[i]] = scratch[:, src[i], step[i]]` for rows with
step >= 0 and dst in range, and the extra_buffer track copies `pool[track[i]] = pool[cache[i]]`
for masked rows."""

import torch

from dflash_sglang.cpu.kernels.mamba_state import (
    conv_scatter_multi_on_cpu,
    scatter_with_mask_on_cpu,
    track_all_layers_on_cpu,
    track_on_cpu,
)

LAYERS, SLOTS, ROWS, STEPS = 2, 6, 3, 4


def fail(*args, **kwargs):
    raise AssertionError("CPU tensors must not reach SGLang's Triton kernel")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def scatter_loop(dst, src, dst_idx, steps, src_idx=None):
    want = dst.clone()
    for i, (d, step) in enumerate(zip(dst_idx.tolist(), steps.tolist(), strict=True)):
        s = i if src_idx is None else int(src_idx[i])
        if step >= 0 and 0 <= d < dst.shape[1]:
            want[:, d] = src[:, s, step]
    return want


def test_commit_copies_each_accepted_step_into_its_slot():
    pool, scratch = rand(LAYERS, SLOTS, 3, 5), rand(LAYERS, ROWS, STEPS, 3, 5, seed=1)
    dst, steps = torch.tensor([4, 0, 2]), torch.tensor([2, -1, 0])  # the second request: nothing to track
    want = scatter_loop(pool, scratch, dst, steps)
    scatter_with_mask_on_cpu(fail, pool, scratch, dst, steps)
    assert torch.equal(pool, want)


def test_commit_reads_explicit_scratch_rows():
    pool, scratch = rand(LAYERS, SLOTS, 3, 5), rand(LAYERS, ROWS, STEPS, 3, 5, seed=1)
    dst, steps, src = torch.tensor([1, 5]), torch.tensor([3, 1]), torch.tensor([2, 0])
    want = scatter_loop(pool, scratch, dst, steps, src)
    scatter_with_mask_on_cpu(fail, pool, scratch, dst, steps, src)
    assert torch.equal(pool, want)


def overlapping_windows(dim=3, width=4):
    """The deduplicated conv scratch: step t's [dim, W-1] window starts at column t of one buffer."""
    phys = rand(LAYERS, ROWS, dim, STEPS + width - 2, seed=2)
    s = phys.stride()
    return phys.as_strided((LAYERS, ROWS, STEPS, dim, width - 1), (s[0], s[1], s[3], s[2], s[3]))


def test_conv_windows_scatter_from_the_overlapping_view():
    pool, windows = rand(LAYERS, SLOTS, 3, 3), overlapping_windows()
    dst, steps = torch.tensor([3, 1, 0]), torch.tensor([0, 3, 2])
    want = scatter_loop(pool, windows, dst, steps)
    scatter_with_mask_on_cpu(fail, pool, windows, dst, steps)
    assert torch.equal(pool, want)


def test_multi_scatter_covers_every_pair_and_the_track_set():
    pairs = [(rand(LAYERS, SLOTS, 3, 3, seed=s), overlapping_windows()) for s in (3, 4)]
    dst, steps = torch.tensor([0, 1, 2]), torch.tensor([1, 0, 3])
    track_dst, track_steps = torch.tensor([3, 4, 5]), torch.tensor([-1, 0, 2])
    wants = [scatter_loop(scatter_loop(p, w, dst, steps), w, track_dst, track_steps) for p, w in pairs]
    conv_scatter_multi_on_cpu(fail, pairs, dst, steps, track_dst, track_steps)
    for (pool, _), want in zip(pairs, wants, strict=True):
        assert torch.equal(pool, want)


def track_loop(pool, cache, mask, track, batch_size, check_freed, layered):
    want = pool.clone()
    for i in range(batch_size):
        src, dst = int(cache[i]), int(track[i])
        if mask[i] and not (check_freed and (src < 0 or dst < 0)):
            if layered:
                want[:, dst] = pool[:, src]
            else:
                want[dst] = pool[src]
    return want


CACHE = torch.tensor([0, 1, 2, 5])
MASK = torch.tensor([True, False, True, True])
TRACK = torch.tensor([3, 4, -1, 2])  # row 2's track slot was freed; row 3 is past batch_size


def test_track_copies_masked_rows_of_one_layer():
    conv, ssm = rand(SLOTS, 3, 3), rand(SLOTS, 2, 4, 4, seed=1)
    wants = [track_loop(p, CACHE, MASK, TRACK, 3, True, False) for p in (conv, ssm)]
    track_on_cpu(fail, conv, ssm, CACHE, MASK, TRACK, 3, check_freed_slots=True)
    assert torch.equal(conv, wants[0]) and torch.equal(ssm, wants[1])


def test_track_copies_masked_rows_of_every_layer():
    conv, ssm = rand(LAYERS, SLOTS, 3, 3), rand(LAYERS, SLOTS, 2, 4, 4, seed=1)
    wants = [track_loop(p, CACHE, MASK, TRACK, 3, True, True) for p in (conv, ssm)]
    track_all_layers_on_cpu(fail, conv, ssm, CACHE, MASK, TRACK, 3, check_freed_slots=True)
    assert torch.equal(conv, wants[0]) and torch.equal(ssm, wants[1])


def test_other_devices_go_to_sglang():
    meta = torch.empty(2, 3, device="meta")

    def original(*args, **kwargs):
        return "sglang"

    assert scatter_with_mask_on_cpu(original, meta, meta, None, None) == "sglang"
    assert conv_scatter_multi_on_cpu(original, [(meta, meta)], None, None) == "sglang"
    assert track_on_cpu(original, meta, meta, None, None, None, 1) == "sglang"
    assert track_all_layers_on_cpu(original, meta, meta, None, None, None, 1) == "sglang"
