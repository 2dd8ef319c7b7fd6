"""Attention sinks (gpt-oss) in SGLang's torch_native backend on CPU (cpu/kernels/attention.py): the sink
softmax against transformers' eager gpt-oss attention, and the backend hooks (prefill with cached
prefixes, decode, TARGET_VERIFY; plain and hybrid SWA pools) against a per-query loop of the
formula, p_j = exp(s_j) / (exp(sink_h) + sum_k exp(s_k))."""

import math
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from dflash_sglang.cpu.kernels.attention import (
    block_visibility,
    forward_decode_on_cpu,
    forward_extend_on_cpu,
    sink_attention,
)

Q_HEADS, KV_HEADS, DIM = 4, 2, 8
SLOTS = 96
ROWS = [2, 0, 3]  # req_pool_indices, out of order on purpose
PREFIXES = [0, 5, 11]  # tokens already in the KV cache
NEW = [3, 7, 4]  # tokens of this extend
SCALE = 1 / math.sqrt(DIM)
SINKS = torch.tensor([0.5, -1.0, 2.0, 0.0])  # one per query head, large enough to matter


def visible(q_pos: int, k_pos: int, window: int | None) -> bool:
    """Causal, and within SGLang's window_left (keys q - window .. q) when there is one."""
    return k_pos <= q_pos and (window is None or k_pos >= q_pos - window)


def loop_reference(q, keys, values, prefixes, new, window, sinks):
    """One query, one head at a time, float64. keys/values[i]: [tokens, kv_heads, dim] of request i."""
    out = torch.zeros(q.shape[0], Q_HEADS, DIM, dtype=torch.float64)
    group, start = Q_HEADS // KV_HEADS, 0
    for i, (prefix, n) in enumerate(zip(prefixes, new, strict=True)):
        for t in range(n):
            q_pos = prefix + t
            seen = [j for j in range(prefix + n) if visible(q_pos, j, window)]
            for h in range(Q_HEADS):
                k_h, v_h = keys[i][:, h // group].double(), values[i][:, h // group].double()
                scores = torch.stack([q[start + t, h].double() @ k_h[j] for j in seen])
                logits = torch.cat([scores * SCALE, sinks[h : h + 1].double()])
                weights = torch.softmax(logits, 0)[:-1]  # the sink takes mass, adds no value
                out[start + t, h] = sum(w * v_h[j] for w, j in zip(weights, seen, strict=True))
        start += n
    return out


@pytest.mark.parametrize("window", [None, 3])
def test_sink_attention_equals_transformers_eager_gpt_oss_attention(window):
    g = torch.Generator().manual_seed(0)
    q_len, k_len = 5, 12  # queries are the last 5 positions
    q = torch.randn(1, Q_HEADS, q_len, DIM, generator=g, dtype=torch.float64)
    k = torch.randn(1, KV_HEADS, k_len, DIM, generator=g, dtype=torch.float64)
    v = torch.randn(1, KV_HEADS, k_len, DIM, generator=g, dtype=torch.float64)
    mask = block_visibility(k_len - q_len, q_len, causal=True, window=window)
    module = SimpleNamespace(num_key_value_groups=Q_HEADS // KV_HEADS, sinks=SINKS.double(), training=False)
    additive = torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    want, _ = eager_attention_forward(module, q, k, v, additive[None, None], scaling=SCALE)
    got = sink_attention(q[0], k[0], v[0], mask, SCALE, SINKS)
    torch.testing.assert_close(got.transpose(0, 1), want[0], rtol=1e-12, atol=1e-12)
    without = sink_attention(q[0], k[0], v[0], mask, SCALE, torch.full((Q_HEADS,), -torch.inf))
    assert not torch.allclose(got, without)  # the sinks matter at these values


def slot_layout(seed=0):
    """req_to_token rows of distinct random slots (slot 0 is SGLang's padding slot), and the K/V
    every token of every request has, by full-pool slot."""
    g = torch.Generator().manual_seed(seed)
    req_to_token = torch.zeros(4, 32, dtype=torch.int32)
    free, used = torch.randperm(SLOTS - 1, generator=g) + 1, 0
    for prefix, n, row in zip(PREFIXES, NEW, ROWS, strict=True):
        req_to_token[row, : prefix + n] = free[used : used + prefix + n]
        used += prefix + n
    k_all = torch.randn(SLOTS, KV_HEADS, DIM, generator=g)
    v_all = torch.randn(SLOTS, KV_HEADS, DIM, generator=g)
    q = torch.randn(sum(NEW), Q_HEADS, DIM, generator=g)
    return req_to_token, k_all, v_all, q


def plain_pool():
    return MHATokenToKVPool(
        size=SLOTS, page_size=1, dtype=torch.float32, head_num=KV_HEADS, head_dim=DIM,
        layer_num=2, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def swa_pool(seed=1):
    """Layer 0 slides (its own pool, reached through a shuffled full->SWA mapping), layer 1 is full."""
    pool = SWAKVPool(
        size=SLOTS, size_swa=SLOTS, page_size=1, dtype=torch.float32, head_num=KV_HEADS, head_dim=DIM,
        swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu",
    )  # fmt: skip
    shuffled = torch.randperm(SLOTS - 1, generator=torch.Generator().manual_seed(seed)) + 1
    pool.register_mapping(torch.cat([torch.tensor([0]), shuffled, torch.tensor([-1])]))
    return pool


def layer(layer_id, window):
    return SimpleNamespace(
        layer_id=layer_id, tp_q_head_num=Q_HEADS, tp_k_head_num=KV_HEADS, qk_head_dim=DIM, v_head_dim=DIM,
        scaling=SCALE, attn_type=AttentionType.DECODER, is_cross_attention=False,
        sliding_window_size=-1 if window is None else window,
    )  # fmt: skip


def backend_over(pool, req_to_token, forward_batch):
    backend = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)  # the pools are all it reads
    backend.token_to_kv_pool = pool
    backend.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token)
    backend.use_sliding_window_kv_pool = isinstance(pool, SWAKVPool)
    backend.init_forward_metadata(forward_batch)  # SGLang's: translates out_cache_loc for SWA layers
    return backend


def cache_prefixes(pool, layer_, req_to_token, k_all, v_all, prefixes):
    """Write the cached tokens' K/V as earlier forwards would have (through SGLang's pool)."""
    from sglang.srt.mem_cache.memory_pool import KVWriteLoc

    slots = torch.cat([req_to_token[r, :p] for r, p in zip(ROWS, prefixes, strict=True)]).long()
    swa = pool.translate_loc_from_full_to_swa(slots) if isinstance(pool, SWAKVPool) else None
    pool.set_kv_buffer(layer_, KVWriteLoc(slots, swa), k_all[slots], v_all[slots])


def new_slots(req_to_token, prefixes, new):
    return torch.cat([req_to_token[r, p : p + n] for r, p, n in zip(ROWS, prefixes, new, strict=True)]).long()


def per_request(tensor, req_to_token, prefixes, new):
    return [tensor[req_to_token[r, : p + n].long()] for r, p, n in zip(ROWS, prefixes, new, strict=True)]


def refuse(*args, **kwargs):
    raise AssertionError("attention with sinks on CPU must not reach SGLang's torch_native")


POOLS_AND_LAYERS = [
    ("plain", 1, None),  # a full-attention layer
    ("plain", 0, 3),  # a sliding layer, masked by window, all its KV kept
    ("swa", 0, 3),  # a sliding layer in SGLang's hybrid SWA pool (gpt-oss's default)
    ("swa", 1, None),  # a full layer of that pool
]


@pytest.mark.parametrize("pool_kind,layer_id,window", POOLS_AND_LAYERS)
def test_extend_with_cached_prefixes(pool_kind, layer_id, window):
    req_to_token, k_all, v_all, q = slot_layout()
    pool = plain_pool() if pool_kind == "plain" else swa_pool()
    attn = layer(layer_id, window)
    cache_prefixes(pool, attn, req_to_token, k_all, v_all, PREFIXES)
    slots = new_slots(req_to_token, PREFIXES, NEW)
    forward_batch = SimpleNamespace(
        forward_mode=ForwardMode.EXTEND, batch_size=3, req_pool_indices=torch.tensor(ROWS),
        seq_lens=torch.tensor(PREFIXES) + torch.tensor(NEW), extend_prefix_lens=torch.tensor(PREFIXES),
        extend_seq_lens=torch.tensor(NEW), out_cache_loc=slots, encoder_lens=None, spec_info=None,
    )  # fmt: skip
    backend = backend_over(pool, req_to_token, forward_batch)
    q_ = q.reshape(len(slots), -1)
    out = forward_extend_on_cpu(
        refuse, backend, q_, k_all[slots], v_all[slots], attn, forward_batch, sinks=SINKS
    )
    keys, values = (per_request(t, req_to_token, PREFIXES, NEW) for t in (k_all, v_all))
    want = loop_reference(q, keys, values, PREFIXES, NEW, window, SINKS)
    assert out.shape == (len(slots), Q_HEADS * DIM)
    torch.testing.assert_close(out.double().view(-1, Q_HEADS, DIM), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool_kind,layer_id,window", POOLS_AND_LAYERS)
def test_decode_one_token_per_request(pool_kind, layer_id, window):
    req_to_token, k_all, v_all, q = slot_layout()
    totals = [p + n for p, n in zip(PREFIXES, NEW, strict=True)]
    cached, one = [t - 1 for t in totals], [1] * 3
    pool = plain_pool() if pool_kind == "plain" else swa_pool()
    attn = layer(layer_id, window)
    cache_prefixes(pool, attn, req_to_token, k_all, v_all, cached)
    slots = new_slots(req_to_token, cached, one)
    forward_batch = SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=3, req_pool_indices=torch.tensor(ROWS),
        seq_lens=torch.tensor(totals), out_cache_loc=slots, encoder_lens=None, spec_info=None,
    )  # fmt: skip
    backend = backend_over(pool, req_to_token, forward_batch)
    q_ = q[:3]
    out = forward_decode_on_cpu(
        refuse, backend, q_.reshape(3, -1), k_all[slots], v_all[slots], attn, forward_batch, sinks=SINKS
    )
    keys, values = (per_request(t, req_to_token, cached, one) for t in (k_all, v_all))
    want = loop_reference(q_, keys, values, cached, one, window, SINKS)
    torch.testing.assert_close(out.double().view(-1, Q_HEADS, DIM), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pool_kind,layer_id,window", POOLS_AND_LAYERS)
def test_target_verify_of_a_block(pool_kind, layer_id, window):
    block = 4
    req_to_token, k_all, v_all, q = slot_layout()
    pool = plain_pool() if pool_kind == "plain" else swa_pool()
    attn = layer(layer_id, window)
    cache_prefixes(pool, attn, req_to_token, k_all, v_all, PREFIXES)
    blocks = [block] * 3
    slots = new_slots(req_to_token, PREFIXES, blocks)
    forward_batch = SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=3, req_pool_indices=torch.tensor(ROWS),
        seq_lens=torch.tensor(PREFIXES), out_cache_loc=slots,
        spec_info=SimpleNamespace(num_tokens_per_req=block, custom_mask=None),
    )  # fmt: skip
    backend = backend_over(pool, req_to_token, forward_batch)
    q_ = q[: 3 * block]
    flat = q_.reshape(len(slots), -1)
    out = forward_extend_on_cpu(
        refuse, backend, flat, k_all[slots], v_all[slots], attn, forward_batch, sinks=SINKS
    )
    keys, values = (per_request(t, req_to_token, PREFIXES, blocks) for t in (k_all, v_all))
    want = loop_reference(q_, keys, values, PREFIXES, blocks, window, SINKS)
    torch.testing.assert_close(out.double().view(-1, Q_HEADS, DIM), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hook", [forward_extend_on_cpu, forward_decode_on_cpu])
def test_without_sinks_or_off_cpu_sglang_runs_as_it_is(hook):
    calls = []

    def original(*args, **kwargs):
        calls.append(kwargs)
        return "sglang"

    extend = SimpleNamespace(forward_mode=ForwardMode.EXTEND)
    cpu, on_meta = torch.zeros(4, 8), torch.empty(4, 8, device="meta")
    assert hook(original, None, cpu, None, None, None, extend, save_kv_cache=False) == "sglang"
    # sinks=None is attention without sinks: SGLang's own path, which takes no such argument.
    assert hook(original, None, cpu, None, None, None, extend, sinks=None) == "sglang"
    # Other devices: SGLang's call exactly as made.
    assert hook(original, None, on_meta, None, None, None, extend, sinks=SINKS) == "sglang"
    assert calls == [{"save_kv_cache": False}, {}, {"sinks": SINKS}]
