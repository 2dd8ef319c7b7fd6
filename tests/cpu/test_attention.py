"""TARGET_VERIFY attention (cpu/kernels/attention.py) against a per-query loop, against SGLang's own
torch_native extend path, and through the backend hook with a real CPU KV pool."""

import math
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

from dflash_sglang.cpu.kernels.attention import (
    block_visibility,
    forward_extend_on_cpu,
    paged_attention,
    request_mask,
)

Q_HEADS, KV_HEADS, DIM, BLOCK = 4, 2, 8, 4
PREFIXES = [0, 5, 11]  # committed tokens per request
ROWS = [2, 0, 3]  # req_pool_indices: rows of req_to_token, out of order on purpose
SLOTS = 64


def verify_attention(q, k_cache, v_cache, req_to_token, rows, prefix_lens, block_len: int, **options):
    """paged_attention for a verify batch: every request's `block_len` queries over its prefix and
    block KV (what the TARGET_VERIFY hook asks of it)."""
    query_lens = [block_len] * len(prefix_lens)
    return paged_attention(q, k_cache, v_cache, req_to_token, rows, prefix_lens, query_lens, **options)


def visible(q_pos: int, k_pos: int, causal: bool, window: int | None) -> bool:
    if causal and k_pos > q_pos:
        return False
    return window is None or window < 0 or k_pos >= q_pos - window


def loop_reference(q, k_cache, v_cache, req_to_token, prefixes, rows, causal, window, scale):
    """One query, one head at a time: softmax over the visible keys, in float64."""
    out = torch.zeros(q.shape[0], Q_HEADS, DIM, dtype=torch.float64)
    group = Q_HEADS // KV_HEADS
    for i, (prefix, row) in enumerate(zip(prefixes, rows, strict=True)):
        slots = req_to_token[row, : prefix + BLOCK].tolist()
        for t in range(BLOCK):
            q_pos = prefix + t
            keys = [j for j in range(prefix + BLOCK) if visible(q_pos, j, causal, window)]
            for h in range(Q_HEADS):
                query = q[i * BLOCK + t, h]
                scores = torch.stack([query @ k_cache[slots[j], h // group] * scale for j in keys])
                weights = torch.softmax(scores, 0)
                out[i * BLOCK + t, h] = sum(
                    w * v_cache[slots[j], h // group] for w, j in zip(weights, keys, strict=True)
                )
    return out


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    req_to_token = torch.zeros(4, 32, dtype=torch.int32)
    free = torch.randperm(SLOTS - 1, generator=g) + 1  # slot 0 is SGLang's padding slot
    used = 0
    for prefix, row in zip(PREFIXES, ROWS, strict=True):
        req_to_token[row, : prefix + BLOCK] = free[used : used + prefix + BLOCK]
        used += prefix + BLOCK
    return SimpleNamespace(
        q=torch.randn(len(ROWS) * BLOCK, Q_HEADS, DIM, generator=g, dtype=torch.float64),
        k_cache=torch.randn(SLOTS, KV_HEADS, DIM, generator=g, dtype=torch.float64),
        v_cache=torch.randn(SLOTS, KV_HEADS, DIM, generator=g, dtype=torch.float64),
        req_to_token=req_to_token,
        rows=torch.tensor(ROWS),
        prefixes=torch.tensor(PREFIXES),
    )


CASES = [(True, None), (False, None), (True, 2), (True, 0)]


@pytest.mark.parametrize("causal,window", CASES)
def test_verify_attention_matches_a_per_query_loop(batch, causal, window):
    scale = 1 / math.sqrt(DIM)
    got = verify_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows, batch.prefixes, BLOCK,
        scaling=scale, causal=causal, window=window,
    )  # fmt: skip
    want = loop_reference(
        batch.q, batch.k_cache, batch.v_cache, batch.req_to_token, PREFIXES, ROWS, causal, window, scale
    )
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_forwards_plan_cache_serves_every_layer_and_follows_req_to_token(batch):
    """One forward's layers share the slots and masks (request_plans); a req_to_token write, a
    different window or a different prefix is a different plan, never a stale one."""
    req_to_token = batch.req_to_token.clone()
    cache: dict = {}

    def attend(window=None, prefixes=batch.prefixes):
        return verify_attention(
            batch.q, batch.k_cache, batch.v_cache, req_to_token, batch.rows, prefixes, BLOCK,
            scaling=0.3, causal=True, window=window, plan_cache=cache,
        )  # fmt: skip

    def uncached(window=None, prefixes=batch.prefixes):
        return verify_attention(
            batch.q, batch.k_cache, batch.v_cache, req_to_token, batch.rows, prefixes, BLOCK,
            scaling=0.3, causal=True, window=window,
        )  # fmt: skip

    first = attend()
    assert len(cache) == 1
    torch.testing.assert_close(attend(), first, rtol=0, atol=0)  # a second layer: served
    assert len(cache) == 1
    torch.testing.assert_close(attend(window=2), uncached(window=2), rtol=0, atol=0)
    torch.testing.assert_close(attend(prefixes=batch.prefixes + 1), uncached(prefixes=batch.prefixes + 1),
                               rtol=0, atol=0)  # fmt: skip
    req_to_token[ROWS[1], 0] = req_to_token[ROWS[2], 0]  # another slot: a new plan
    moved = attend()
    torch.testing.assert_close(moved, uncached(), rtol=0, atol=0)
    assert not torch.equal(moved, first)


def test_the_plan_cache_takes_inference_tensors(batch):
    """A server's step makes its tensors under inference_mode (tree masks among them), and those
    keep no version counter: the cache must still serve them, equal to the uncached result."""
    cache: dict = {}
    with torch.inference_mode():
        req_to_token = batch.req_to_token.clone()

        def attend(plan_cache):
            return verify_attention(
                batch.q, batch.k_cache, batch.v_cache, req_to_token, batch.rows, batch.prefixes, BLOCK,
                scaling=0.3, causal=True, plan_cache=plan_cache,
            )  # fmt: skip

        cached, served, uncached = attend(cache), attend(cache), attend(None)
    assert len(cache) == 1
    torch.testing.assert_close(cached, uncached, rtol=0, atol=0)
    torch.testing.assert_close(served, uncached, rtol=0, atol=0)


@pytest.mark.parametrize("causal,window", CASES)
def test_verify_equals_sglang_extend_with_the_block_as_extension(batch, causal, window):
    """A verify block is an extend of BLOCK tokens after the committed prefix."""
    backend = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)  # only its SDPA helper is used
    extend_out = torch.empty(batch.q.shape[0], Q_HEADS, DIM, dtype=torch.float64)
    backend._run_sdpa_forward_extend(
        batch.q, extend_out, batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows,
        batch.prefixes + BLOCK, batch.prefixes, torch.full((3,), BLOCK),
        scaling=0.3, enable_gqa=True, causal=causal, sliding_window_size=window,
    )  # fmt: skip
    got = verify_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows, batch.prefixes, BLOCK,
        scaling=0.3, causal=causal, window=window,
    )  # fmt: skip
    torch.testing.assert_close(got, extend_out, rtol=1e-10, atol=1e-10)


def test_request_masks_are_left_out_only_where_every_key_is_visible():
    """None (SDPA's mask-free path) exactly where block_visibility is all True; the mask itself
    everywhere else."""
    for prefix in (0, 1, 7):
        for block_len in (1, 2, 5):
            for causal in (True, False):
                for window in (None, 0, 2, 50):
                    want = block_visibility(prefix, block_len, causal, window)
                    got = request_mask(prefix, block_len, causal, window, "cpu")
                    if got is None:
                        assert window is None and want.all()
                    else:
                        assert torch.equal(got, want), (prefix, block_len, causal, window)
    assert request_mask(7, 1, True, None, "cpu") is None  # a width-1 verify, as a decode
    assert request_mask(7, 5, False, None, "cpu") is None  # the drafter's non-causal block


def test_a_width_1_verify_attends_as_sglangs_decode_bit_for_bit(batch):
    """A width-1 step's verify attention runs what no-spec's decode runs (torch_native's SDPA
    without a mask), so it gives the very same bits."""
    rows, prefixes = batch.rows, batch.prefixes
    q = batch.q[: len(ROWS)]  # one query a request, at position prefix
    backend = TorchNativeAttnBackend.__new__(TorchNativeAttnBackend)  # only its SDPA helper is used
    decode_out = torch.empty_like(q)
    backend._run_sdpa_forward_decode(
        q, decode_out, batch.k_cache, batch.v_cache, batch.req_to_token, rows, prefixes + 1,
        scaling=0.3, enable_gqa=True, causal=False,
    )  # fmt: skip
    got = verify_attention(
        q, batch.k_cache, batch.v_cache, batch.req_to_token, rows, prefixes, 1, scaling=0.3, causal=True
    )
    torch.testing.assert_close(got, decode_out, rtol=0, atol=0)


def test_block_visibility_shapes_the_mask():
    assert block_visibility(2, 3, causal=False, window=None).all()
    causal = block_visibility(2, 3, causal=True, window=None)
    assert causal.tolist() == [
        [True, True, True, False, False],
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    windowed = block_visibility(2, 3, causal=True, window=1)
    assert windowed.tolist() == [
        [False, True, True, False, False],
        [False, False, True, True, False],
        [False, False, False, True, True],
    ]


def cpu_pool():
    return MHATokenToKVPool(
        size=SLOTS, page_size=1, dtype=torch.float32, head_num=KV_HEADS, head_dim=DIM,
        layer_num=1, device="cpu", enable_memory_saver=False,
    )  # fmt: skip


def layer(attn_type, sliding_window_size=-1):
    return SimpleNamespace(
        layer_id=0, tp_q_head_num=Q_HEADS, tp_k_head_num=KV_HEADS, qk_head_dim=DIM, v_head_dim=DIM,
        scaling=1 / math.sqrt(DIM), attn_type=attn_type, is_cross_attention=False,
        sliding_window_size=sliding_window_size,
    )  # fmt: skip


@pytest.mark.parametrize(
    "attn_type,window,causal,expected_window",
    [
        (AttentionType.DECODER, -1, True, None),  # the target's verify
        (AttentionType.ENCODER_ONLY, -1, False, None),  # a full-attention draft layer
        (AttentionType.DECODER, 2, True, 2),  # a sliding draft layer
        (AttentionType.ENCODER_ONLY, 2, False, None),  # SGLang: windows only for causal layers
    ],
)
def test_backend_hook_writes_the_block_kv_and_attends(batch, attn_type, window, causal, expected_window):
    pool = cpu_pool()
    req_to_token = batch.req_to_token
    prefix_slots = torch.cat([req_to_token[r, :p] for r, p in zip(ROWS, PREFIXES, strict=True)]).long()
    block_slots = torch.cat([req_to_token[r, p : p + BLOCK] for r, p in zip(ROWS, PREFIXES, strict=True)])
    k_all, v_all = batch.k_cache.float(), batch.v_cache.float()
    pool.k_buffer[0][prefix_slots] = k_all[prefix_slots]  # the committed prefix is already cached
    pool.v_buffer[0][prefix_slots] = v_all[prefix_slots]
    backend = SimpleNamespace(
        token_to_kv_pool=pool, req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
        swa_out_cache_loc=None,
    )  # fmt: skip
    forward_batch = SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, batch_size=3, req_pool_indices=batch.rows,
        seq_lens=batch.prefixes, out_cache_loc=block_slots.long(),
        spec_info=SimpleNamespace(num_tokens_per_req=BLOCK, custom_mask=None),
    )  # fmt: skip
    q = batch.q.float().reshape(-1, Q_HEADS * DIM)
    k, v = k_all[block_slots.long()], v_all[block_slots.long()]

    def original(*args, **kwargs):
        raise AssertionError("TARGET_VERIFY on CPU must not reach SGLang's forward_extend")

    out = forward_extend_on_cpu(original, backend, q, k, v, layer(attn_type, window), forward_batch)

    torch.testing.assert_close(pool.k_buffer[0][block_slots.long()], k)
    want = loop_reference(
        batch.q, batch.k_cache, batch.v_cache, req_to_token, PREFIXES, ROWS, causal, expected_window,
        1 / math.sqrt(DIM),
    )  # fmt: skip
    assert out.shape == (len(ROWS) * BLOCK, Q_HEADS * DIM)
    torch.testing.assert_close(out.double().view(-1, Q_HEADS, DIM), want, rtol=1e-5, atol=1e-5)


def test_backend_hook_hands_other_modes_and_devices_to_sglang():
    calls = []

    def original(*args, **kwargs):
        calls.append(args[-1].forward_mode)
        return "sglang"

    extend = SimpleNamespace(forward_mode=ForwardMode.EXTEND)
    verify = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY)
    on_meta = torch.empty(4, 8, device="meta")
    assert forward_extend_on_cpu(original, None, torch.zeros(4, 8), None, None, None, extend) == "sglang"
    assert forward_extend_on_cpu(original, None, on_meta, None, None, None, verify) == "sglang"
    assert calls == [ForwardMode.EXTEND, ForwardMode.TARGET_VERIFY]


def ancestors_of(parents: list[int]) -> torch.Tensor:
    """[n, n] bool: node i's ancestors and itself, from its parent pointers (parent < i)."""
    mask = torch.eye(len(parents), dtype=torch.bool)
    for node, parent in enumerate(parents):
        if parent >= 0:
            mask[node] |= mask[parent]
    return mask


def test_a_tree_mask_lets_each_node_see_the_prefix_its_ancestors_and_itself(batch):
    """Tree verify: one random tree per request in SGLang's QLEN_ONLY layout; each node's output
    equals softmax attention over exactly the prefix and its root path (float64 loop)."""
    trees = [[-1, 0, 0, 1], [-1, 0, 1, 2], [-1, 0, 0, 0]]  # parents: branchy, a chain, a star
    tree_mask = torch.stack([ancestors_of(parents) for parents in trees])
    out = verify_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows, batch.prefixes, BLOCK,
        scaling=None, causal=True, tree_mask=tree_mask.flatten(),
    )  # fmt: skip
    group = Q_HEADS // KV_HEADS
    for i, (prefix, row) in enumerate(zip(PREFIXES, ROWS, strict=True)):
        slots = batch.req_to_token[row, : prefix + BLOCK].tolist()
        for node in range(BLOCK):
            keys = [*range(prefix), *(prefix + j for j in range(BLOCK) if tree_mask[i, node, j])]
            for h in range(Q_HEADS):
                query = batch.q[i * BLOCK + node, h].double()
                k = torch.stack([batch.k_cache[slots[j], h // group].double() for j in keys])
                v = torch.stack([batch.v_cache[slots[j], h // group].double() for j in keys])
                want = torch.softmax(k @ query / math.sqrt(DIM), 0) @ v
                torch.testing.assert_close(out[i * BLOCK + node, h].double(), want, rtol=1e-5, atol=1e-5)


def test_ragged_tree_masks_verify_each_request_its_first_nodes(batch):
    """Per-request lengths on trees (step/ragged.py): request i attends with its first n_i nodes
    and their n_i x n_i mask, flat one after another; the first nodes of a tree hold their
    ancestors (parent < node), so each output equals the whole tree's at that node."""
    trees = [[-1, 0, 0, 1], [-1, 0, 1, 2], [-1, 0, 0, 0]]
    masks = [ancestors_of(parents) for parents in trees]
    args = (batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows, batch.prefixes)
    whole = verify_attention(batch.q, *args, BLOCK, scaling=None, causal=True,
                             tree_mask=torch.stack(masks).flatten())  # fmt: skip
    lengths = [2, 4, 1]
    keep = torch.cat([torch.arange(n) + i * BLOCK for i, n in enumerate(lengths)])
    flat = torch.cat([mask[:n, :n].flatten() for mask, n in zip(masks, lengths, strict=True)])
    ragged = paged_attention(batch.q[keep], *args, lengths, scaling=None, causal=True, tree_mask=flat)
    torch.testing.assert_close(ragged, whole[keep], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="tree mask of"):  # a mask of the wrong size is loud
        paged_attention(batch.q[keep], *args, lengths, scaling=None, causal=True, tree_mask=flat[:-1])


def test_tree_masks_on_sliding_window_layers_are_refused_loudly(batch):
    with pytest.raises(NotImplementedError, match="tree"):
        verify_attention(
            batch.q, batch.k_cache, batch.v_cache, batch.req_to_token, batch.rows, batch.prefixes, BLOCK,
            scaling=None, causal=True, window=2, tree_mask=torch.ones(3 * BLOCK * BLOCK, dtype=torch.bool),
        )  # fmt: skip
