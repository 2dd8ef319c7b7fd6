"""The MHA form of MLA prefill on torch_native (cpu/kernels/mla.py): SGLang's own forward_extend fails on it
(it reads keys from the latent pool); through the hook it equals a per-query loop, and it equals
the weight-absorbed form, which SGLang's own forward_extend computes over the latent pool."""

import math
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from dflash_sglang.cpu.kernels.attention import forward_extend_on_cpu
from dflash_sglang.cpu.kernels.mla import ragged_causal_attention

HEADS, NOPE, ROPE, V_DIM, LATENT = 4, 16, 8, 16, 32
SEQ_LENS = [1, 5, 3]  # new tokens per request, no cached prefix
ROWS = [2, 0, 1]  # req_pool_indices, out of order on purpose
TOKENS = sum(SEQ_LENS)
SCALE = 1 / math.sqrt(NOPE + ROPE)


@pytest.fixture(scope="module")
def mla():
    """Random MLA tensors: the latent c and shared rotary key of every token, per-head queries,
    and kv_b_proj split into its key (W_k) and value (W_v) halves."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    return SimpleNamespace(
        latent=randn(TOKENS, LATENT), k_pe=randn(TOKENS, ROPE), q_nope=randn(TOKENS, HEADS, NOPE),
        q_pe=randn(TOKENS, HEADS, ROPE), w_k=randn(HEADS, NOPE, LATENT) / 4,
        w_v=randn(HEADS, V_DIM, LATENT) / 4,
    )  # fmt: skip


def mha_inputs(m):
    """What forward_normal hands attn_mha: per-head keys and values expanded from the latent."""
    q = torch.cat([m.q_nope, m.q_pe], -1)
    k_nope = torch.einsum("tl,hnl->thn", m.latent, m.w_k)
    k = torch.cat([k_nope, m.k_pe[:, None].expand(-1, HEADS, -1)], -1)
    v = torch.einsum("tl,hvl->thv", m.latent, m.w_v)
    return q, k, v


def pool():
    return MLATokenToKVPool(
        size=64, page_size=1, dtype=torch.float32, kv_lora_rank=LATENT, qk_rope_head_dim=ROPE,
        layer_num=1, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def backend(kv_pool):
    req_to_token = torch.zeros(4, 16, dtype=torch.int32)
    slots, start = torch.arange(1, TOKENS + 1, dtype=torch.int32), 0
    for row, length in zip(ROWS, SEQ_LENS, strict=True):
        req_to_token[row, :length] = slots[start : start + length]
        start += length
    native = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)  # its pools, no model runner
    native.token_to_kv_pool, native.swa_out_cache_loc = kv_pool, None
    native.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token)
    return native, slots.long()


def extend_batch(out_cache_loc):
    lens = torch.tensor(SEQ_LENS)
    return SimpleNamespace(
        forward_mode=ForwardMode.EXTEND, req_pool_indices=torch.tensor(ROWS), seq_lens=lens,
        extend_seq_lens=lens, extend_prefix_lens=torch.zeros_like(lens), extend_seq_lens_cpu=SEQ_LENS,
        extend_prefix_lens_cpu=[0] * len(SEQ_LENS), encoder_lens=None, out_cache_loc=out_cache_loc,
    )  # fmt: skip


def layer(kv_heads, qk_dim, v_dim, mha: bool):
    fields = dict(
        layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=kv_heads, tp_v_head_num=kv_heads, qk_head_dim=qk_dim,
        v_head_dim=v_dim, scaling=SCALE, attn_type=None, is_cross_attention=False, sliding_window_size=-1,
    )  # fmt: skip
    if mha:
        fields["kv_b_proj"] = None  # DeepseekV2AttentionMLA marks its attn_mha so
    return SimpleNamespace(**fields)


MHA_LAYER = layer(HEADS, NOPE + ROPE, V_DIM, mha=True)
MQA_LAYER = layer(1, LATENT + ROPE, LATENT, mha=False)  # attn_mqa: one latent KV head


def loop_reference(q, k, v):
    """One query, one head at a time, in float64: softmax over its own sequence's keys up to it."""
    q, k, v = q.double(), k.double(), v.double()
    out, start = torch.zeros(TOKENS, HEADS, v.shape[-1], dtype=torch.float64), 0
    for length in SEQ_LENS:
        for t in range(start, start + length):
            for h in range(HEADS):
                weights = torch.softmax(k[start : t + 1, h] @ q[t, h] * SCALE, 0)
                out[t, h] = weights @ v[start : t + 1, h]
        start += length
    return out


def test_ragged_causal_attention_matches_a_per_query_loop(mla):
    q, k, v = mha_inputs(mla)
    out = ragged_causal_attention(q, k, v, SEQ_LENS, SCALE)
    torch.testing.assert_close(out.double(), loop_reference(q, k, v), rtol=1e-5, atol=1e-5)


def test_sglang_torch_native_fails_on_the_mha_form(mla):
    native, slots = backend(pool())
    q, k, v = mha_inputs(mla)
    with pytest.raises(RuntimeError):  # the pool's latent keys are LATENT + ROPE wide, not NOPE + ROPE
        TorchNativeAttnBackend.forward_extend(
            native, q.flatten(1), k, v, MHA_LAYER, extend_batch(slots), save_kv_cache=False
        )


def test_the_hook_computes_the_mha_form_and_it_equals_the_absorbed_form(mla):
    native, slots = backend(pool())
    q, k, v = mha_inputs(mla)

    def original(*args, **kwargs):
        raise AssertionError("the MHA form must not reach SGLang's forward_extend")

    mha = forward_extend_on_cpu(original, native, q.flatten(1), k, v, MHA_LAYER, extend_batch(slots), False)
    assert mha.shape == (TOKENS, HEADS * V_DIM)
    want = loop_reference(q, k, v)
    torch.testing.assert_close(mha.double().view(TOKENS, HEADS, V_DIM), want, rtol=1e-5, atol=1e-5)
    assert not native.token_to_kv_pool.get_key_buffer(0).any()  # the latent is cached apart, not here

    # The absorbed form, through SGLang's own path: queries into the latent space, attention over
    # the cached [latent | rotary key], then each head's output through W_v.
    q_absorbed = torch.cat([torch.einsum("thn,hnl->thl", mla.q_nope, mla.w_k), mla.q_pe], -1)
    # The pool as forward_absorb leaves it (its set_kv_buffer wants a published parallel config).
    native.token_to_kv_pool.get_key_buffer(0)[slots] = torch.cat([mla.latent, mla.k_pe], -1)[:, None]
    latent_out = forward_extend_on_cpu(
        TorchNativeAttnBackend.forward_extend, native, q_absorbed.flatten(1), None, None, MQA_LAYER,
        extend_batch(slots), False,
    )  # fmt: skip
    absorbed = torch.einsum("thl,hvl->thv", latent_out.view(TOKENS, HEADS, LATENT), mla.w_v)
    torch.testing.assert_close(mha.view(TOKENS, HEADS, V_DIM), absorbed, rtol=1e-5, atol=1e-5)


def test_other_extends_go_to_sglang_and_a_cached_prefix_is_refused(mla):
    native, slots = backend(pool())
    q, k, v = mha_inputs(mla)

    def original(*args, **kwargs):
        return "sglang"

    batch = extend_batch(slots)
    assert forward_extend_on_cpu(original, native, q, k, v, MHA_LAYER, batch, True) == "sglang"  # caches
    assert forward_extend_on_cpu(original, native, q, k, v, MQA_LAYER, batch, False) == "sglang"  # no marker
    batch.extend_prefix_lens_cpu = [0, 2, 0]
    with pytest.raises(NotImplementedError, match="cached prefix"):
        forward_extend_on_cpu(original, native, q, k, v, MHA_LAYER, batch, False)
