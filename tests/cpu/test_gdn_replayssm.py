"""GDN ReplaySSM spec-verify on CPU (cpu/gated_deltanet/replayssm.py): the verify, the cursor advance and the
circular commit, over a run of verify windows with random accept counts, against

- an independent float64 reference: the gated delta rule token by token, fed only the accepted
  tokens. Each verify's outputs equal the reference's for every window token; after each commit,
  the checkpoint with the ring's pending records [base, base + wp) replayed on it equals the
  reference state (the checkpoint itself right after a fold); track slots hold the state at the
  tracked step; the verify writes only the window's ring slots and never the checkpoint or cursors;
  padding rows (slot -1) read zeros, rows flagged for flush get no output;
- SGLang's own Triton kernels run by Triton's interpreter on CPU (sglang_replayssm_probe.py, in a
  subprocess with TRITON_INTERPRET=1): outputs, rings and checkpoints within float32 rounding,
  cursors equal, in history mode (records build up over rounds), with a fold every commit, with
  bfloat16 rings (their low parts) and in launch_mode="both" (exact raw fold). Triton 3.8's
  interpreter gets `tl.dot` of bfloat16 operands wrong, so SGLang's commit kernel (which dots the
  bfloat16 rings) is compared only on fp32 rings; ours on bfloat16 rings is checked against the
  reference here.
"""

import math
from pathlib import Path

import pytest
import torch

from dflash_sglang.cpu.gated_deltanet.replayssm import (
    commit_gdn_replayssm_circular_on_cpu,
    commit_gdn_replayssm_spec_on_cpu,
    gdn_replayssm_spec_decode_on_cpu,
)
from tests.interpreter_probe import run_probe

HEADS, HEADS_V, DIM, SLOTS, RING_ROWS = 2, 4, 16, 8, 6


def reference_steps(state, q, k, v, g, beta, scale):
    """float64 gated delta rule, one token at a time: state [HV, V, K]; q, k [T, H, K]; v [T, HV, V];
    g, beta [T, HV]. Returns (outputs [T, HV, V], the state after every token [T, HV, V, K])."""

    def unit(x):
        x = x.double()
        return x / math.sqrt(float(x @ x) + 1e-6)

    S, outs, states = state.double().clone(), torch.zeros(v.shape, dtype=torch.float64), []
    for t in range(v.shape[0]):
        for h in range(HEADS_V):
            kh, qh = unit(k[t, h * HEADS // HEADS_V]), unit(q[t, h * HEADS // HEADS_V])
            S[h] *= math.exp(g[t, h])
            S[h] += beta[t, h] * torch.outer(v[t, h].double() - S[h] @ kh, kh)
            outs[t, h] = S[h] @ qh * scale
        states.append(S.clone())
    return outs, torch.stack(states)


def pending_state(checkpoint, d, k, g, base, wp, L):
    """The checkpoint with records [base, base + wp) of one row's ring replayed in order."""
    S = checkpoint.double().clone()
    for t in range(wp):
        at = (base + t) % L
        for h in range(HEADS_V):
            S[h] = math.exp(g[h, at]) * S[h] + torch.outer(
                d[h, at].double(), k[h * HEADS // HEADS_V, at].double()
            )
    return S


def run(L, D, rounds, dtype=torch.float32, seed=0):
    """Verify/commit rounds for 3 requests and a padding row, checked against the reference.
    Returns the counts of folds, tracked states and rows in history mode, and the largest error of
    the outputs, folded checkpoints, pending states and track slots against the reference."""
    gen = torch.Generator().manual_seed(seed)
    slots, rows, tracks = [5, 0, 2, -1], [3, 0, 5, 1], [7, -1, 1, 4]
    bs, errors = len(slots), dict.fromkeys(("out", "fold", "pending", "track"), 0.0)

    def error(kind, ours, reference):
        errors[kind] = max(errors[kind], float((ours.double() - reference).abs().max()))

    checkpoint = torch.randn(SLOTS, HEADS_V, DIM, DIM, generator=gen) * 0.3
    ring = {
        "d": torch.zeros(RING_ROWS, HEADS_V, L, DIM, dtype=dtype),
        "k": torch.zeros(RING_ROWS, HEADS, L, DIM, dtype=dtype),
        "g": torch.zeros(RING_ROWS, HEADS_V, L),
    }
    low = {"rawv_cache": None, "rawk_cache": None}
    if dtype != torch.float32:
        low = {"rawv_cache": torch.zeros_like(ring["d"]), "rawk_cache": torch.zeros_like(ring["k"])}
    cursors = {"write_pos": torch.zeros(RING_ROWS, dtype=torch.int32),
               "cache_base": torch.tensor([0, 3, 0, 7, 0, 12], dtype=torch.int32) & (L - 1),
               "is_flush": torch.zeros(RING_ROWS, dtype=torch.int8)}  # fmt: skip
    reference = [checkpoint[s].double() if s >= 0 else None for s in slots]
    A_log, dt_bias = torch.randn(HEADS_V, generator=gen) * 0.5, torch.randn(HEADS_V, generator=gen)
    folds = tracked = history_rounds = 0
    for _ in range(rounds):
        q, k = (torch.randn(bs * D, HEADS, DIM, generator=gen).to(dtype) for _ in range(2))
        v = torch.randn(bs * D, HEADS_V, DIM, generator=gen).to(dtype)
        a, b = (torch.randn(bs * D, HEADS_V, generator=gen) for _ in range(2))
        g = -A_log.exp() * torch.nn.functional.softplus(a + dt_bias)
        beta = b.sigmoid()
        out = torch.full((bs * D, HEADS_V, DIM), float("nan"), dtype=dtype)
        before = {name: x.clone() for name, x in {**ring, **cursors, "checkpoint": checkpoint}.items()}
        gdn_replayssm_spec_decode_on_cpu(
            None, q, k, v, a, b, A_log, dt_bias, checkpoint, ring["d"], ring["k"], ring["g"], *low.values(),
            None, out, torch.arange(0, bs * D + 1, D, dtype=torch.int32), torch.tensor(slots),
            torch.tensor(rows, dtype=torch.int32), *cursors.values(), L, D, DIM**-0.5, True, -1,
            launch_mode="verify",
        )  # fmt: skip
        assert torch.equal(checkpoint, before["checkpoint"])
        assert all(torch.equal(cursors[c], before[c]) for c in cursors)
        accepted = torch.randint(1, D + 1, (bs,), generator=gen)
        steps = torch.stack([torch.randint(-1, int(n), (), generator=gen) for n in accepted])
        expected_tracks = {}
        for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
            window = slice(i * D, (i + 1) * D)
            if slot < 0:
                assert (out[window] == 0).all()
                continue
            ref_out, ref_states = reference_steps(
                reference[i], q[window], k[window], v[window], g[window], beta[window], DIM**-0.5
            )
            error("out", out[window], ref_out)
            wp, base = int(before["write_pos"][row]), int(before["cache_base"][row])
            written = {(base + wp + s) % L for s in range(D) if wp + s < L}
            untouched = [t for t in range(L) if t not in written]
            assert all(torch.equal(ring[n][row][:, untouched], before[n][row][:, untouched]) for n in ring)
            reference[i] = ref_states[int(accepted[i]) - 1]
            if steps[i] >= 0 and tracks[i] >= 0:
                expected_tracks[tracks[i]] = ref_states[int(steps[i])]
        commit_gdn_replayssm_spec_on_cpu(
            None, cursors["write_pos"], cursors["cache_base"], cursors["is_flush"], accepted.int(),
            torch.tensor(rows), L, D, null_block_id=-1,
        )  # fmt: skip
        flushing = [bool(cursors["is_flush"][r]) for r in rows]
        for i, row in enumerate(rows):  # the advance: wp += accepted; flush when wp + 2D > L
            # (a padding row's cursors advance too; only the commit skips it, so it stays flagged)
            wp = 0 if before["is_flush"][row] else int(before["write_pos"][row])
            assert int(cursors["write_pos"][row]) == wp + int(accepted[i])
            assert flushing[i] == (int(cursors["write_pos"][row]) + 2 * D > L)
        lows = [None if x is None else x[None] for x in low.values()]
        commit_gdn_replayssm_circular_on_cpu(
            None, checkpoint_state=checkpoint[None], d_cache=ring["d"][None], k_cache=ring["k"][None],
            g_cache=ring["g"][None], d_residual_cache=lows[0], k_residual_cache=lows[1],
            state_batch_indices=torch.tensor(slots), replay_indices=torch.tensor(rows), **cursors,
            accept_lens=accepted.int(), mamba_track_indices=torch.tensor(tracks), mamba_steps_to_track=steps,
        )  # fmt: skip
        for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
            if slot < 0:
                assert torch.equal(checkpoint[4], before["checkpoint"][4])  # its track slot
                continue
            wp, base = int(cursors["write_pos"][row]), int(cursors["cache_base"][row])
            if flushing[i]:
                assert wp == 0 and not cursors["is_flush"][row]
                error("fold", checkpoint[slot], reference[i])
                folds += 1
            else:
                assert torch.equal(checkpoint[slot], before["checkpoint"][slot])  # history mode
                history_rounds += wp > int(accepted[i])
            low_d = 0 if low["rawv_cache"] is None else low["rawv_cache"][row].double()
            low_k = 0 if low["rawk_cache"] is None else low["rawk_cache"][row].double()
            state = pending_state(checkpoint[slot], ring["d"][row].double() + low_d,
                                  ring["k"][row].double() + low_k, ring["g"][row], base, wp, L)  # fmt: skip
            error("pending", state, reference[i])
        for track_slot, state in expected_tracks.items():
            error("track", checkpoint[track_slot], state)
            tracked += 1
    return folds, tracked, history_rounds, errors


@pytest.mark.parametrize("L,D", [(16, 4), (8, 4), (16, 8)])
def test_verify_and_commit_follow_the_accepted_tokens(L, D):
    folds, tracked, history_rounds, errors = run(L, D, rounds=6)
    assert folds > 0 and tracked > 0
    assert history_rounds > 0 or L < 4 * D  # with L = 16, D = 4 records build up before a fold
    assert max(errors.values()) < 1e-5, errors


def test_bfloat16_rings_with_their_low_parts_follow_the_reference():
    folds, tracked, _, errors = run(16, 4, rounds=6, dtype=torch.bfloat16, seed=1)
    assert folds > 0 and tracked > 0
    assert errors["out"] < 2e-3  # bfloat16 outputs; the verify replays the history's high parts
    # The low parts matter: without them the folded and tracked states are off by about 5e-3.
    assert max(errors["fold"], errors["pending"], errors["track"]) < 1e-3, errors


def verify_args(**changes):
    L, D, n = 8, 4, 2
    args = dict(
        q=torch.randn(n * D, HEADS, DIM), k=torch.randn(n * D, HEADS, DIM),
        v=torch.randn(n * D, HEADS_V, DIM),
        a=torch.randn(n * D, HEADS_V), b=torch.randn(n * D, HEADS_V), A_log=torch.zeros(HEADS_V),
        dt_bias=torch.zeros(HEADS_V), checkpoint_state=torch.randn(SLOTS, HEADS_V, DIM, DIM),
        d_cache=torch.randn(RING_ROWS, HEADS_V, L, DIM), k_cache=torch.randn(RING_ROWS, HEADS, L, DIM),
        g_cache=torch.randn(RING_ROWS, HEADS_V, L), rawv_cache=None, rawk_cache=None, beta_cache=None,
        out=torch.full((n * D, HEADS_V, DIM), 7.0), query_start_loc=torch.tensor([0, D, 2 * D]),
        ssm_state_indices=torch.tensor([1, 3]), replay_indices=torch.tensor([2, 0]),
        write_pos=torch.tensor([1, 0, 2, 0, 0, 0], dtype=torch.int32),
        cache_base=torch.zeros(RING_ROWS, dtype=torch.int32), is_flush=torch.tensor([0, 0, 1, 0, 0, 0]),
        max_cache_len=L, max_spec_len=D, null_block_id=-1, launch_mode="verify",
    )  # fmt: skip
    return {**args, **changes}


def test_a_row_flagged_for_flush_gets_no_output_and_no_ring_write():
    args = verify_args()
    rings = [args[n].clone() for n in ("d_cache", "k_cache", "g_cache")]
    gdn_replayssm_spec_decode_on_cpu(None, **args)
    assert (args["out"][:4] == 7).all() and not (args["out"][4:] == 7).any()  # request 0 is flagged
    assert all(
        torch.equal(args[n][2], r[2]) for n, r in zip(("d_cache", "k_cache", "g_cache"), rings, strict=True)
    )
    assert not torch.equal(args["d_cache"][0], rings[0][0])


def test_paths_not_implemented_raise_and_other_devices_get_sglangs_kernel():
    with pytest.raises(NotImplementedError, match="bfloat16 checkpoint"):
        gdn_replayssm_spec_decode_on_cpu(
            None, **verify_args(checkpoint_state=torch.zeros(8, 4, 16, 16).bfloat16())
        )
    with pytest.raises(NotImplementedError, match="launch_mode='fold'"):
        gdn_replayssm_spec_decode_on_cpu(None, **verify_args(launch_mode="fold"))
    with pytest.raises(ValueError, match="raw replay buffers"):
        gdn_replayssm_spec_decode_on_cpu(None, **verify_args(launch_mode="both"))
    args = verify_args(q=torch.zeros(8, HEADS, DIM, device="meta"))
    calls = []
    gdn_replayssm_spec_decode_on_cpu(lambda *a, **kw: calls.append((a, kw)), **args)
    assert calls and calls[0][0][0] is args["q"] and "dot_precision" not in calls[0][1]


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("sglang_replayssm_probe.py"))


FP32_CASES = ["L16 D4 history", "L8 D4 fold", "L16 D8 fold", "L16 D4 exact raw both"]


@pytest.mark.parametrize("case", FP32_CASES)
def test_ours_equal_sglangs_kernels_run_by_the_interpreter(report, case):
    assert report[f"{case} cursors equal"], report[f"{case} cursors"]
    for key in ("out", "checkpoint", "d", "k", "g"):
        assert report[f"{case} {key} max diff"] < 2e-6, key
    if case.endswith("raw both"):
        assert report[f"{case} rawv max diff"] == 0 and report[f"{case} rawk max diff"] == 0
        assert report[f"{case} beta max diff"] < 1e-6
    else:
        assert report[f"{case} sglang commit compared"]


def test_bfloat16_rings_equal_sglangs_verify_within_their_rounding(report):
    case = "L16 D4 bf16 rings"
    assert report[f"{case} cursors equal"]
    assert report[f"{case} out max diff"] <= 2**-8 * max(1.0, report[f"{case} out max abs"])
    assert report[f"{case} k high+low max diff"] < 1e-4  # the normalised key, high + low parts
    assert report[f"{case} d high+low max diff"] < 1e-2 and report[f"{case} checkpoint max diff"] < 1e-2
    if report["interpreter_bf16_dot_error"] < 1e-3:  # an interpreter whose bfloat16 dot is right
        assert report[f"{case} sglang commit compared"]


def test_a_fold_read_in_the_rings_physical_order_equals_one_read_in_sequence():
    """fold_records with `order` (the commit reads each row's whole ring as stored, wrapped past
    lane L - 1, and says where each lane sits in its sequence) equals the fold of the same records
    read in sequence order, for every count."""
    from dflash_sglang.cpu.gated_deltanet.replayssm_math import fold_records

    gen, L, rows = torch.Generator().manual_seed(3), 8, 4
    states = torch.randn(rows, HEADS_V, DIM, DIM, generator=gen)
    d = torch.randn(rows, HEADS_V, L, DIM, generator=gen)
    k = torch.randn(rows, HEADS_V, L, DIM, generator=gen)
    g = -torch.rand(rows, HEADS_V, L, generator=gen)
    base = torch.tensor([0, 3, 6, 7])
    order = (torch.arange(L) - base[:, None]) & (L - 1)  # lane j holds record order[j]
    lane_of = (base[:, None] + torch.arange(L)) & (L - 1)  # record t sits at lane lane_of[t]

    def in_sequence(x):
        index = lane_of[:, None, :].expand(rows, HEADS_V, L)
        return x.gather(2, index if x.dim() == 3 else index[..., None].expand(*x.shape))

    for count in range(L + 1):
        counts = torch.full((rows,), count)
        ours = fold_records(states, d, k, g, counts, order=order)
        want = fold_records(states, in_sequence(d), in_sequence(k), in_sequence(g), counts)
        torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-5)
