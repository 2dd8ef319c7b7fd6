"""GDN ReplaySSM spec-verify (`--enable-linear-replayssm-spec`) on CPU tensors.

SGLang's path (`kernels/ops/attention/linear/gdn_replayssm_spec_decode.py`, three Triton kernels)
keeps, per request-pool row, a ring of the last L committed steps' records (d, normalised k, g; the
cursors `write_pos`, `cache_base`, `is_flush`) next to a frozen fp32 checkpoint in the mamba pool:

- gdn_replayssm_spec_decode (verify, `gdn_backend._replayssm_target_verify`): the window's output
  from the checkpoint + ring history [base, base + wp) + the window itself; writes the window's
  records at `(base + wp + s) & (L - 1)` where wp + s < L; never the checkpoint or the cursors;
- commit_gdn_replayssm_spec (`spec_utils.commit_mamba_states_after_verify`): cursor advance;
- commit_gdn_replayssm_circular: fold the ring into the checkpoint for flush rows (then base += wp,
  wp = 0) and write track slots from the pre-commit checkpoint plus the records up to the track step.

Callers import them inside their functions at call time, so the module attribute the hooks patch is
what they get. Here the verify runs the recurrence token by token from the rebuilt start state
(replayssm_math.py); the kernel's chunked (I + A)^-1 form computes the same sums in another order.
"""

from __future__ import annotations

import torch

from .delta_rule import gdn_gates, l2_normalize
from .replayssm_math import exact_fold, fold_records, per_value_head, recurrent_window

_MODULE = "sglang.kernels.ops.attention.linear.gdn_replayssm_spec_decode"
VERIFY_TARGET = f"{_MODULE}.gdn_replayssm_spec_decode"
ADVANCE_TARGET = f"{_MODULE}.commit_gdn_replayssm_spec"
COMMIT_TARGET = f"{_MODULE}.commit_gdn_replayssm_circular"
LAUNCH_MODES = ("verify", "flush", "both")


def _ring(cache, rows, phys):
    """cache[rows[i], :, phys[i, t]] as [N, heads, T, ...] (ring layout [slot, heads, L, ...])."""
    return cache[rows[:, None], :, phys].transpose(1, 2)


def gdn_replayssm_spec_decode_on_cpu(
    original, q, k, v, a, b, A_log, dt_bias, checkpoint_state, d_cache, k_cache, g_cache, rawv_cache,
    rawk_cache, beta_cache, out, query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base,
    is_flush, max_cache_len, max_spec_len, scale=None, use_qk_l2norm_in_kernel=True, null_block_id=0,
    block_v=64, num_warps=1, num_stages=2, nk=2, bs_min=4, block_v_flush=64, num_warps_flush=1,
    num_stages_flush=2, nk_flush=2, launch_mode="both", dot_precision=None,
):  # fmt: skip
    """AROUND gdn_replayssm_spec_decode. Every launch mode ("verify", which the GDN backend uses;
    "flush" and "both", which also replay the raw ring into the checkpoint first) for an fp32
    checkpoint, with fp32 or 16-bit rings (their low parts when `rawv/rawk_cache` are given, the
    exact raw records when `beta_cache` is too). A 16-bit checkpoint (the kernel's tensor-core
    output path) raises NotImplementedError. Tile sizes and `dot_precision` do not apply."""
    args = (
        q, k, v, a, b, A_log, dt_bias, checkpoint_state, d_cache, k_cache, g_cache, rawv_cache, rawk_cache,
        beta_cache, out, query_start_loc, ssm_state_indices, replay_indices, write_pos, cache_base, is_flush,
        max_cache_len, max_spec_len, scale, use_qk_l2norm_in_kernel, null_block_id, block_v, num_warps,
        num_stages, nk, bs_min, block_v_flush, num_warps_flush, num_stages_flush, nk_flush, launch_mode,
    )  # fmt: skip
    if not q.is_cpu:  # dot_precision's default depends on the GPU: SGLang's own when not given
        return original(*args, **({} if dot_precision is None else {"dot_precision": dot_precision}))
    if checkpoint_state.dtype != torch.float32:
        raise NotImplementedError(
            f"CPU ReplaySSM verify: {checkpoint_state.dtype} checkpoint (only float32 is implemented)"
        )
    if launch_mode not in LAUNCH_MODES:
        raise NotImplementedError(f"CPU ReplaySSM verify: launch_mode={launch_mode!r}")
    if max_cache_len & (max_cache_len - 1):
        raise ValueError("circular cache requires power-of-two max_cache_len")
    raw_given = rawv_cache is not None and rawk_cache is not None
    if launch_mode != "verify" and not (raw_given and beta_cache is not None):
        raise ValueError("raw replay buffers are required for exact-fold launch")
    scale = checkpoint_state.shape[-1] ** -0.5 if scale is None else scale
    bounds = query_start_loc.tolist()
    slots, rows = ssm_state_indices.long(), replay_indices.long()
    live = slots > null_block_id
    flush = torch.zeros_like(live)
    flush[live] = is_flush[rows[live]] != 0
    if launch_mode in ("verify", "both"):
        for i in (~live).nonzero().flatten().tolist():
            out[bounds[i] : bounds[i + 1]] = 0
    picked = []
    if launch_mode in ("verify", "both"):
        picked.append((live & ~flush, True))
    if launch_mode in ("flush", "both"):
        fold_rows = (live & flush).nonzero().flatten()
        if len(fold_rows):
            raw = (rawk_cache, rawv_cache, g_cache, beta_cache)
            _exact_fold(checkpoint_state, *raw, slots[fold_rows], rows[fold_rows], write_pos, cache_base,
                        max_cache_len, use_qk_l2norm_in_kernel)  # fmt: skip
        picked.append((live & flush, False))
    gates = gdn_gates(A_log, a, b, dt_bias)
    for mask, history in picked:
        chosen = mask.nonzero().flatten().tolist()
        if chosen:
            _verify_rows(
                chosen, history, bounds, slots, rows, q, k, v, gates, checkpoint_state, d_cache, k_cache,
                g_cache, rawv_cache, rawk_cache, beta_cache, out, write_pos, cache_base, max_cache_len,
                scale, use_qk_l2norm_in_kernel,
            )  # fmt: skip
    return out


def _exact_fold(checkpoint, rawk, rawv, g_cache, beta_cache, slots, rows, write_pos, cache_base, L, norm):
    counts = write_pos[rows].long()
    steps = torch.arange(max(int(counts.max()), 0))
    phys = (cache_base[rows].long()[:, None] + steps) & (L - 1)
    heads_v = checkpoint.shape[1]
    keys = per_value_head(_ring(rawk, rows, phys).transpose(1, 2), heads_v).transpose(1, 2)
    records = (keys, _ring(rawv, rows, phys), _ring(g_cache, rows, phys), _ring(beta_cache, rows, phys))
    folded = exact_fold(checkpoint[slots], *records, counts, norm)
    checkpoint[slots[counts > 0]] = folded[counts > 0].to(checkpoint.dtype)


def _verify_rows(
    chosen, history, bounds, slots, rows, q, k, v, gates, checkpoint, d_cache, k_cache, g_cache, rawv_cache,
    rawk_cache, beta_cache, out, write_pos, cache_base, L, scale, norm,
):  # fmt: skip
    """One window per chosen request: output, then the window's ring records."""
    heads_v = checkpoint.shape[1]
    lengths = [bounds[i + 1] - bounds[i] for i in chosen]
    width = max(lengths)
    steps = torch.arange(width)
    valid = steps < torch.tensor(lengths)[:, None]
    tokens = (torch.tensor([bounds[i] for i in chosen])[:, None] + steps).clamp(max=max(q.shape[0] - 1, 0))
    picked = torch.tensor(chosen)
    row_slots, ring_rows = slots[picked], rows[picked]
    base, wp = cache_base[ring_rows].long(), write_pos[ring_rows].long()
    qs, ks = q[tokens].float(), k[tokens].float()
    if norm:
        qs, ks = l2_normalize(qs), l2_normalize(ks)
    g, beta = (x[tokens] for x in gates)
    states = checkpoint[row_slots].float()
    pending = int(wp.max()) if history else 0
    if pending:  # the kernel reads max(16, L) history lanes masked by wp: only the first wp count
        lanes = torch.arange(pending)
        phys = (base[:, None] + lanes) & (L - 1)
        hist_keys = per_value_head(_ring(k_cache, ring_rows, phys).transpose(1, 2), heads_v).transpose(1, 2)
        states = fold_records(states, _ring(d_cache, ring_rows, phys), hist_keys,
                              _ring(g_cache, ring_rows, phys), wp)  # fmt: skip
    o, d, _ = recurrent_window(
        states, per_value_head(qs * scale, heads_v), per_value_head(ks, heads_v), v[tokens], g, beta, valid
    )
    written = valid & (wp[:, None] + steps < L)
    rr, ss = written.nonzero(as_tuple=True)
    out[tokens[valid]] = o[valid].to(out.dtype)
    at, slot_rows = (base[rr] + wp[rr] + ss) & (L - 1), ring_rows[rr]
    d_high = d[rr, ss].to(d_cache.dtype)
    k_high = ks[rr, ss].to(k_cache.dtype)
    d_cache[slot_rows, :, at] = d_high
    k_cache[slot_rows, :, at] = k_high
    g_cache[slot_rows, :, at] = g[rr, ss]
    if rawv_cache is None or rawk_cache is None:
        return
    if beta_cache is not None:  # exact raw records, for the exact fold
        rawk_cache[slot_rows, :, at] = k[tokens][rr, ss].to(rawk_cache.dtype)
        rawv_cache[slot_rows, :, at] = v[tokens][rr, ss].to(rawv_cache.dtype)
        beta_cache[slot_rows, :, at] = beta[rr, ss]
    else:  # low parts of compact d and normalised k
        rawk_cache[slot_rows, :, at] = (ks[rr, ss] - k_high.float()).to(k.dtype).to(rawk_cache.dtype)
        rawv_cache[slot_rows, :, at] = (d[rr, ss] - d_high.float()).to(rawv_cache.dtype)


def commit_gdn_replayssm_spec_on_cpu(
    original, write_pos, cache_base, is_flush, num_accepted, replay_indices, max_cache_len, max_spec_len,
    fold_every_commit=False, cache_buf_len=None, null_block_id=0,
):  # fmt: skip
    """AROUND commit_gdn_replayssm_spec: wp += accepted (or = accepted after a flush, base += wp
    then); the next step flushes when wp > 0 (fold every commit) or wp + 2 * max_spec_len > L."""
    if not write_pos.is_cpu:
        return original(
            write_pos, cache_base, is_flush, num_accepted, replay_indices, max_cache_len, max_spec_len,
            fold_every_commit, cache_buf_len, null_block_id,
        )  # fmt: skip
    buf_len = max_cache_len if cache_buf_len is None else cache_buf_len
    rows = replay_indices.long()
    live = rows > null_block_id
    rows, accepted = rows[live], num_accepted[live].long()
    wp, base, flushing = write_pos[rows].long(), cache_base[rows].long(), is_flush[rows] != 0
    new_base = torch.where(flushing & (accepted > 0), (base + wp) & (buf_len - 1), base)
    new_wp = torch.where(flushing, accepted, wp + accepted)
    next_flush = new_wp > 0 if fold_every_commit else new_wp + 2 * max_spec_len > max_cache_len
    write_pos[rows] = new_wp.to(write_pos.dtype)
    cache_base[rows] = new_base.to(cache_base.dtype)
    is_flush[rows] = next_flush.to(is_flush.dtype)


def commit_gdn_replayssm_circular_on_cpu(
    original, *, checkpoint_state, d_cache, k_cache, g_cache, d_residual_cache, k_residual_cache,
    state_batch_indices, replay_indices, write_pos, cache_base, is_flush, accept_lens,
    mamba_track_indices=None, mamba_steps_to_track=None, null_block_id=-1,
):  # fmt: skip
    """AROUND commit_gdn_replayssm_circular, every layer at once ([layers, slot, HV, V, K]), fp32
    or 16-bit rings (with their low parts when given: the kernel's high/low compensation)."""
    given = dict(
        checkpoint_state=checkpoint_state, d_cache=d_cache, k_cache=k_cache, g_cache=g_cache,
        d_residual_cache=d_residual_cache, k_residual_cache=k_residual_cache,
        state_batch_indices=state_batch_indices, replay_indices=replay_indices, write_pos=write_pos,
        cache_base=cache_base, is_flush=is_flush, accept_lens=accept_lens,
        mamba_track_indices=mamba_track_indices, mamba_steps_to_track=mamba_steps_to_track,
        null_block_id=null_block_id,
    )  # fmt: skip
    if not checkpoint_state.is_cpu:
        return original(**given)
    L, heads_v = d_cache.shape[-2], checkpoint_state.shape[2]
    slots, rows = state_batch_indices.long(), replay_indices.long()
    live = (slots > null_block_id).nonzero().flatten()
    slots, rows = slots[live], rows[live]
    counts, fold = write_pos[rows].long(), is_flush[rows] != 0
    if mamba_track_indices is not None and mamba_steps_to_track is not None:
        track_slots, track_steps = mamba_track_indices[live].long(), mamba_steps_to_track[live].long()
        track = (track_slots > null_block_id) & (track_steps >= 0)
        track_counts = counts - accept_lens[live].long() + track_steps + 1
    else:
        track = torch.zeros_like(fold)
    if bool((fold | track).any()):
        # Each row's whole ring in its physical lane order (one gather a cache), each lane's place
        # in the row's sequence beside it: a gather in sequence order copied every record twice.
        layers = checkpoint_state.shape[0]
        order = ((torch.arange(L) - cache_base[rows].long()[:, None]) & (L - 1)).repeat(layers, 1)

        def ring(cache):  # [layers, R, heads, L, ..] -> [layers * N, heads, L, ..]
            return cache.index_select(1, rows).flatten(0, 1)  # 10x `cache[:, rows]` on CPU

        updates, keys = ring(d_cache).float(), ring(k_cache).float()
        if d_residual_cache is not None and k_residual_cache is not None:
            updates, keys = updates + ring(d_residual_cache).float(), keys + ring(k_residual_cache).float()
        keys = per_value_head(keys.transpose(1, 2), heads_v).transpose(1, 2)
        old = checkpoint_state.index_select(1, slots)
        records = (updates, keys, ring(g_cache))

        def folded(n):
            new = fold_records(old.flatten(0, 1), *records, n.repeat(layers), k_cache.dtype, order)
            return new.view(old.shape).to(checkpoint_state.dtype)

        if bool(track.any()):
            checkpoint_state[:, track_slots[track]] = folded(track_counts)[:, track]
        if bool(fold.any()):
            checkpoint_state[:, slots[fold]] = folded(counts)[:, fold]
    done = rows[fold]
    cache_base[done] = ((cache_base[done].long() + counts[fold]) & (L - 1)).to(cache_base.dtype)
    write_pos[done] = 0
    is_flush[done] = 0
