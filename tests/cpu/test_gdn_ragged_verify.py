"""A ragged TARGET_VERIFY through a Gated DeltaNet layer on CPU (cpu/gated_deltanet/ragged_verify.py), under
SGLang's ReplaySSM ring: one forward where request i verifies its own L_i tokens equals, request by
request, SGLang's own `GDNAttnBackend.forward_extend` run on that request alone as a uniform verify
of width L_i (its [bs, draft_token_num] path), both over the CPU stand-ins of the conv update and
the ring verify (cpu/gated_deltanet/causal_conv1d.py, replayssm.py): the outputs, the ring records it
writes, the per-step conv windows the commit reads back (step s of request i at its verify row) and
the live conv state; the checkpoint and the cursors untouched. Rings hold history (write_pos > 0)
so the verify replays records too. Not ragged: SGLang's original runs; the ring off: refused.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from sglang.kernels.ops.attention.linear import gdn_replayssm_spec_decode as ring_kernels
from sglang.srt.layers.attention.linear import gdn_backend
from sglang.srt.layers.attention.linear.gdn_backend import GDNAttnBackend
from sglang.srt.mem_cache.memory_pool import MambaPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.ragged_verify import RaggedVerifyLayout

from dflash_sglang.cpu.gated_deltanet.causal_conv1d import causal_conv1d_update_on_cpu
from dflash_sglang.cpu.gated_deltanet.ragged_verify import forward_extend_on_cpu
from dflash_sglang.cpu.gated_deltanet.replayssm import gdn_replayssm_spec_decode_on_cpu

H, HV, K, W, L = 2, 4, 8, 4, 8  # key heads, value heads, head dim (K == V), conv width, ring length
SLOTS, ROWS = 8, 8
DIM = 2 * H * K + HV * K  # q | k | v
LENGTHS = [3, 1, 5, 2]
SLOT_OF = [4, 1, 2, 6]  # mamba slot of each request
ROW_OF = [2, 0, 5, 7]  # request-pool row (ring row) of each request
WRITE_POS = [3, 0, 2, 1]  # pending ring records of each request's row


@pytest.fixture(autouse=True)
def stand_ins(monkeypatch):
    """SGLang's module symbols as the CPU layer's hooks make them (the registry is not applied here)."""
    monkeypatch.setattr(
        gdn_backend, "causal_conv1d_update", functools.partial(causal_conv1d_update_on_cpu, None)
    )
    monkeypatch.setattr(
        ring_kernels, "gdn_replayssm_spec_decode", functools.partial(gdn_replayssm_spec_decode_on_cpu, None)
    )


def make_layer(gen):
    return SimpleNamespace(
        layer_id=0, conv_weights=torch.randn(DIM, W, generator=gen) * 0.5,
        bias=torch.randn(DIM, generator=gen), activation="silu", q_dim=H * K, k_dim=H * K, v_dim=HV * K,
        num_q_heads=H, num_k_heads=H, num_v_heads=HV, head_q_dim=K, head_k_dim=K, head_v_dim=K,
        A_log=torch.randn(HV, generator=gen) * 0.3,
        dt_bias=torch.randn(HV, generator=gen) * 0.3,
    )  # fmt: skip


def make_state(gen, ring=True):
    cache = MambaPool.SpeculativeState(
        conv=[torch.randn(SLOTS, DIM, W - 1, generator=gen)],
        temporal=torch.randn(SLOTS, HV, K, K, generator=gen) * 0.2,
        replayssm_d=torch.randn(ROWS, HV, L, K, generator=gen) * 0.1 if ring else None,
        replayssm_k=torch.nn.functional.normalize(torch.randn(ROWS, H, L, K, generator=gen), dim=-1)
        if ring
        else None,
        replayssm_g=-torch.rand(ROWS, HV, L, generator=gen) if ring else None,
        intermediate_ssm=None,
        intermediate_conv_window=[torch.zeros(ROWS + 1, max(LENGTHS), DIM, W - 1)],
    )
    write_pos = torch.zeros(ROWS, dtype=torch.int32)
    write_pos[ROW_OF] = torch.tensor(WRITE_POS, dtype=torch.int32)
    pool = SimpleNamespace(
        replayssm_cache_base=torch.arange(ROWS, dtype=torch.int32) % L if ring else None,
        replayssm_spec_write_pos=write_pos, replayssm_is_flush=torch.zeros(ROWS, dtype=torch.int32),
        replayssm_spec_fold=False, replayssm_is_kda=False,
    )  # fmt: skip
    return cache, pool


def clone(cache, pool):
    copy = lambda x: None if x is None else x.clone()  # noqa: E731
    cache = MambaPool.SpeculativeState(
        conv=[cache.conv[0].clone()], temporal=cache.temporal.clone(), replayssm_d=copy(cache.replayssm_d),
        replayssm_k=copy(cache.replayssm_k), replayssm_g=copy(cache.replayssm_g), intermediate_ssm=None,
        intermediate_conv_window=[cache.intermediate_conv_window[0].clone()],
    )  # fmt: skip
    return cache, SimpleNamespace(
        **{k: copy(v) if isinstance(v, torch.Tensor) else v for k, v in vars(pool).items()}
    )


def backend_over(cache, pool, requests, query_start_loc):
    backend = object.__new__(GDNAttnBackend)
    backend.req_to_token_pool = SimpleNamespace(
        mamba_pool=pool, size=ROWS, mamba2_layer_cache=lambda layer_id: cache
    )
    backend.verify_intermediate_state_indices = torch.arange(ROWS, dtype=torch.int32)
    backend.mis_metadata = None
    backend._use_strided_target_verify_qkv = False
    backend.forward_metadata = SimpleNamespace(
        query_start_loc=query_start_loc, mamba_cache_indices=torch.tensor([SLOT_OF[r] for r in requests]),
        retrieve_next_token=None, retrieve_next_sibling=None, retrieve_parent_token=None,
    )  # fmt: skip
    return backend


def verify_batch(requests, width, layout):
    return SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY,
        spec_info=SimpleNamespace(ragged_verify_layout=layout, draft_token_num=width),
        req_pool_indices=torch.tensor([ROW_OF[r] for r in requests]),
    )


def inputs(gen):
    tokens = sum(LENGTHS)
    return (torch.randn(tokens, DIM, generator=gen), torch.randn(tokens, HV, generator=gen),
            torch.randn(tokens, HV, generator=gen))  # fmt: skip


def not_called(*args, **kwargs):
    raise AssertionError("SGLang's original ran on a ragged CPU verify")


def test_a_ragged_verify_equals_each_request_alone_at_its_own_width():
    gen = torch.Generator().manual_seed(0)
    layer, (cache, pool), (mixed_qkv, a, b) = make_layer(gen), make_state(gen), inputs(gen)
    before = clone(cache, pool)
    layout = RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=LENGTHS, device="cpu", grid=[sum(LENGTHS)])
    requests = list(range(len(LENGTHS)))
    backend = backend_over(cache, pool, requests, layout.qo_indptr_device)
    out = forward_extend_on_cpu(
        not_called, backend, layer, verify_batch(requests, max(LENGTHS), layout), mixed_qkv, a, b
    )
    assert out.shape == (1, sum(LENGTHS), HV, K)
    torch.testing.assert_close(cache.temporal, before[0].temporal, rtol=0, atol=0)  # checkpoint untouched
    for name in ("replayssm_spec_write_pos", "replayssm_cache_base", "replayssm_is_flush"):
        assert torch.equal(getattr(pool, name), getattr(before[1], name))
    start = 0
    for r, length in enumerate(LENGTHS):
        alone_cache, alone_pool = clone(*before)
        alone = backend_over(alone_cache, alone_pool, [r], torch.tensor([0, length], dtype=torch.int32))
        tokens = slice(start, start + length)
        want = GDNAttnBackend.forward_extend(
            alone, layer, verify_batch([r], length, None), mixed_qkv[tokens], a[tokens], b[tokens]
        )
        torch.testing.assert_close(out[:, tokens], want, rtol=1e-6, atol=1e-6)
        slot, row = SLOT_OF[r], ROW_OF[r]
        assert torch.equal(cache.conv[0][slot], alone_cache.conv[0][slot])  # the live state after L_i
        # The windows the commit reads (step accepted - 1 < L_i): request r's verify row is r.
        windows, alone_windows = cache.intermediate_conv_window[0], alone_cache.intermediate_conv_window[0]
        assert torch.equal(windows[r, :length], alone_windows[0, :length])
        for ring in ("replayssm_d", "replayssm_k", "replayssm_g"):
            torch.testing.assert_close(
                getattr(cache, ring)[row], getattr(alone_cache, ring)[row], rtol=1e-6, atol=1e-6
            )
        start += length
    # The records landed after each row's history, one per verified position (and nothing else moved).
    changed = (cache.replayssm_g != before[0].replayssm_g).sum(dim=(1, 2)) // HV
    assert changed[ROW_OF].tolist() == LENGTHS and int(changed.sum()) == sum(LENGTHS)


def test_a_uniform_verify_runs_sglangs_original():
    gen = torch.Generator().manual_seed(1)
    layer, (cache, pool), (mixed_qkv, a, b) = make_layer(gen), make_state(gen), inputs(gen)
    backend = backend_over(cache, pool, [0], torch.tensor([0, 3], dtype=torch.int32))
    seen = []
    forward_extend_on_cpu(
        lambda *args, **kwargs: seen.append(args),
        backend,
        layer,
        verify_batch([0], 3, None),
        mixed_qkv[:3],
        a,
        b,
    )
    assert len(seen) == 1 and seen[0][0] is backend


def test_a_ragged_verify_without_the_ring_is_refused():
    gen = torch.Generator().manual_seed(2)
    layer, (cache, pool), (mixed_qkv, a, b) = make_layer(gen), make_state(gen, ring=False), inputs(gen)
    layout = RaggedVerifyLayout.from_verify_lens(verify_lens_cpu=LENGTHS, device="cpu", grid=[sum(LENGTHS)])
    requests = list(range(len(LENGTHS)))
    backend = backend_over(cache, pool, requests, layout.qo_indptr_device)
    with pytest.raises(NotImplementedError, match="ReplaySSM ring"):
        forward_extend_on_cpu(not_called, backend, layer, verify_batch(requests, 5, layout), mixed_qkv, a, b)


@pytest.mark.parametrize(
    "ring,device,why",
    [
        (True, "cpu", None),
        (True, "cuda", "SGLang 0.5.23's GDN ring kernels take no ragged layout"),
        (False, "cpu", "a hybrid target's state per block position takes one width a batch"),
    ],
)
def test_hybrid_targets_verify_per_request_lengths_only_through_the_ring_on_cpu(
    monkeypatch, ring, device, why
):
    from sglang.srt.configs import Qwen3_5Config

    from dflash_sglang.runtime import dp_attention
    from dflash_sglang.step import ragged

    monkeypatch.setattr(ragged, "replay_ring_asked_for", lambda: ring)
    monkeypatch.setattr(dp_attention, "enabled", lambda: False)
    runner = SimpleNamespace(model_config=SimpleNamespace(hf_config=Qwen3_5Config()), device=device)
    assert ragged.ragged_off_because(runner, None, None) == why
