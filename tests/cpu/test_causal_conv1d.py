"""The causal conv1d stand-ins (cpu/gated_deltanet/causal_conv1d.py) against transformers'
qwen3_5 `causal_conv1d_update`
(concatenate the W-1 state columns and the new inputs, convolve, keep the last W-1 as the state),
including verify mode, where the window after every step is saved, into a dense buffer and into
the overlapping as_strided view SGLang's pool uses on CUDA hosts."""

import pytest
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import causal_conv1d_update as transformers_update

from dflash_sglang.cpu.gated_deltanet.causal_conv1d import (
    PAD_SLOT_ID,
    causal_conv1d_fn_on_cpu,
    causal_conv1d_update_on_cpu,
)

DIM, WIDTH, SLOTS = 6, 4, 5
TOL = dict(atol=1e-5, rtol=1e-5)


def fail(*args, **kwargs):
    raise AssertionError("CPU tensors must not reach SGLang's Triton kernel")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


WEIGHT, BIAS = rand(DIM, WIDTH, seed=1), rand(DIM, seed=2)


def reference(x, state):
    """transformers over one request: x [dim, T], state [dim, W-1] -> (out [dim, T], new state)."""
    state = state.clone()[None]
    out = transformers_update(x[None], state, WEIGHT, BIAS, "silu")
    return out[0], state[0]


def test_prefill_packs_sequences_seeds_only_cached_prefixes_and_skips_padding():
    lengths, slots, seeded = [2, 7, 3, 4], [3, 0, -1, 1], [False, True, False, True]
    x = rand(DIM, sum(lengths))
    states = rand(SLOTS, DIM, WIDTH - 1, seed=3)
    before = states.clone()
    cu = torch.tensor([0, 2, 9, 12, 16], dtype=torch.int32)
    out = causal_conv1d_fn_on_cpu(
        fail, x, WEIGHT, BIAS, states, cu, lengths, cache_indices=torch.tensor(slots),
        has_initial_state=torch.tensor(seeded), activation="silu",
    )  # fmt: skip
    for i, slot in enumerate(slots):
        seq = slice(cu[i], cu[i + 1])
        if slot == -1:
            assert not out[:, seq].any()
            continue
        prior = before[slot] if seeded[i] else torch.zeros(DIM, WIDTH - 1)
        want_out, want_state = reference(x[:, seq], prior)
        torch.testing.assert_close(out[:, seq], want_out, **TOL)
        torch.testing.assert_close(states[slot], want_state, **TOL)
    assert torch.equal(states[[2, 4]], before[[2, 4]])


def test_decode_steps_one_token_per_request():
    x = rand(3, DIM)
    states = rand(SLOTS, DIM, WIDTH - 1, seed=3)
    before = states.clone()
    slots = [4, 0, 2]
    out = causal_conv1d_update_on_cpu(
        fail, x, states, WEIGHT, BIAS, "silu", conv_state_indices=torch.tensor(slots)
    )
    assert out.shape == x.shape
    for i, slot in enumerate(slots):
        want_out, want_state = reference(x[i, :, None], before[slot])
        torch.testing.assert_close(out[i], want_out[:, 0], **TOL)
        torch.testing.assert_close(states[slot], want_state, **TOL)


def overlapping_windows(rows: int, steps: int) -> torch.Tensor:
    """SGLang's deduplicated layout: one [dim, steps + W-2] buffer per row, step t's window at column t."""
    phys = torch.zeros(rows, DIM, steps + WIDTH - 2)
    stride = phys.stride()
    return phys.as_strided((rows, steps, DIM, WIDTH - 1), (stride[0], stride[2], stride[1], stride[2]))


@pytest.mark.parametrize("layout", ["dense", "overlapping"])
def test_verify_saves_the_window_after_every_step(layout):
    block, slots, rows = 8, [2, 4], [1, 0]
    x = rand(2, DIM, block)
    states = rand(SLOTS, DIM, WIDTH - 1, seed=3)
    before = states.clone()
    windows = torch.zeros(2, block, DIM, WIDTH - 1) if layout == "dense" else overlapping_windows(2, block)
    out = causal_conv1d_update_on_cpu(
        fail, x, states, WEIGHT, BIAS, "silu", conv_state_indices=torch.tensor(slots),
        intermediate_conv_window=windows, intermediate_state_indices=torch.tensor(rows),
    )  # fmt: skip
    for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
        want_out, want_state = reference(x[i], before[slot])
        torch.testing.assert_close(out[i], want_out, **TOL)
        torch.testing.assert_close(states[slot], want_state, **TOL)  # the live state ends after the block
        for step in range(block):  # the state after step + 1 tokens, what a commit of that step restores
            _, want_window = reference(x[i, :, : step + 1], before[slot])
            torch.testing.assert_close(windows[row, step], want_window, **TOL)


def test_padding_rows_and_num_accept_tokens():
    states = rand(SLOTS, DIM, WIDTH - 1, seed=3)
    before = states.clone()
    out = causal_conv1d_update_on_cpu(
        fail, rand(1, DIM), states, WEIGHT, None, None, conv_state_indices=torch.tensor([-1])
    )
    assert not out.any() and torch.equal(states, before)
    with pytest.raises(NotImplementedError):
        causal_conv1d_update_on_cpu(
            fail, rand(1, DIM, 2), states, WEIGHT, num_accept_tokens=torch.ones(1, dtype=torch.int32)
        )


def test_a_padding_row_among_others_is_skipped_and_the_rest_computed():
    """Several rows take the batched path (one conv for all): a padding row between two live ones
    gets zeros and leaves every slot and window row of its own alone."""
    block, slots, rows = 4, [3, -1, 1], [0, 2, 1]
    x = rand(3, DIM, block)
    states = rand(SLOTS, DIM, WIDTH - 1, seed=3)
    before = states.clone()
    windows = torch.zeros(3, block, DIM, WIDTH - 1)
    out = causal_conv1d_update_on_cpu(
        fail, x, states, WEIGHT, BIAS, "silu", conv_state_indices=torch.tensor(slots),
        intermediate_conv_window=windows, intermediate_state_indices=torch.tensor(rows),
    )  # fmt: skip
    assert not out[1].any() and not windows[2].any()
    untouched = [s for s in range(SLOTS) if s not in (3, 1)]
    assert torch.equal(states[untouched], before[untouched])
    for i in (0, 2):
        want_out, want_state = reference(x[i], before[slots[i]])
        torch.testing.assert_close(out[i], want_out, **TOL)
        torch.testing.assert_close(states[slots[i]], want_state, **TOL)
        _, want_window = reference(x[i, :, :2], before[slots[i]])
        torch.testing.assert_close(windows[rows[i], 1], want_window, **TOL)


def test_other_devices_go_to_sglang():
    meta = torch.empty(DIM, 4, device="meta")

    def original(*args, **kwargs):
        return "sglang"

    assert causal_conv1d_fn_on_cpu(original, meta, WEIGHT, None, None, None, [4]) == "sglang"
    assert causal_conv1d_update_on_cpu(original, meta, None, WEIGHT) == "sglang"


def test_the_padding_slot_is_sglangs():
    from sglang.kernels.ops.mamba import causal_conv1d_triton

    assert causal_conv1d_triton.PAD_SLOT_ID == PAD_SLOT_ID
