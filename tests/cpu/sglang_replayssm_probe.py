"""SGLang's own GDN ReplaySSM Triton kernels, run by Triton's interpreter on CPU (`TRITON_INTERPRET=1`,
set by test_gdn_replayssm.py before Triton loads), against cpu/gated_deltanet/replayssm.py on the same inputs.

Each case runs several verify / commit rounds of 3 requests (plus, in one case, a padding request
with mamba slot -1) through both: `gdn_replayssm_spec_decode`, then `commit_gdn_replayssm_spec`
(cursor advance, random accept counts) and `commit_gdn_replayssm_circular` (fold flush rows, write
track slots at random steps). K = V = 32 (the verify kernel needs next_pow2(K) / nk >= 16), 1 key
head, 2 value heads. Cases: ring length 16 with windows of 4 (history builds up over rounds before
a fold), 8 with windows of 4 and 16 with windows of 8 (a fold after every commit), bfloat16
activations (compact rings with their low parts, fp32 checkpoint), and launch_mode="both" with the
exact raw records (the exact fold inside the verify, then the cursor advance).

Triton 3.8's interpreter computes `tl.dot` of bfloat16 operands wrongly (values near 1e10 for unit
inputs; `interpreter_bf16_dot_error` below measures it). The compact commit kernel dots the
bfloat16 rings, so in the bfloat16 case both sides commit with ours, and SGLang's commit is compared
only when the interpreter's bfloat16 dot is right; the verify kernel's fp32-checkpoint path dots in
fp32 and is compared.

Prints a JSON report as the last stdout line: per case, the max differences of outputs, rings and
checkpoints, and whether the cursors are equal.
"""

import json

import torch

HEADS, HEADS_V, DIM, SLOTS, RING_ROWS = 1, 2, 32, 6, 5
CASES = {
    "L16 D4 history": dict(L=16, D=4, rounds=4),
    "L8 D4 fold": dict(L=8, D=4, rounds=3, null_row=True),
    "L16 D8 fold": dict(L=16, D=8, rounds=2),
    "L16 D4 bf16 rings": dict(L=16, D=4, rounds=4, dtype=torch.bfloat16),
    "L16 D4 exact raw both": dict(L=16, D=4, rounds=5, raw=True),
}


def buffers(L, dtype, raw, layers=2):
    gen = torch.Generator().manual_seed(7)
    state = {
        "checkpoint": torch.randn(layers, SLOTS, HEADS_V, DIM, DIM, generator=gen) * 0.3,
        "d": torch.zeros(layers, RING_ROWS, HEADS_V, L, DIM, dtype=dtype),
        "k": torch.zeros(layers, RING_ROWS, HEADS, L, DIM, dtype=dtype),
        "g": torch.zeros(layers, RING_ROWS, HEADS_V, L),
        "write_pos": torch.zeros(RING_ROWS, dtype=torch.int32),
        "cache_base": torch.tensor([0, 13, 5, 0, 2], dtype=torch.int32) & (L - 1),
        "is_flush": torch.zeros(RING_ROWS, dtype=torch.int8),
    }
    if dtype != torch.float32 or raw:
        state["rawv"] = torch.zeros(layers, RING_ROWS, HEADS_V, L, DIM, dtype=dtype)
        state["rawk"] = torch.zeros(layers, RING_ROWS, HEADS, L, DIM, dtype=dtype)
    if raw:
        state["beta"] = torch.zeros(layers, RING_ROWS, HEADS_V, L)
    return state


def run_case(kernels, L, D, rounds, dtype=torch.float32, raw=False, null_row=False):
    verify, advance, commit = kernels
    gen = torch.Generator().manual_seed(L * 100 + D)
    slots = [3, 0, 5] + ([-1] if null_row else [])
    replay = [2, 0, 4] + ([3] if null_row else [])
    bs = len(slots)
    state = buffers(L, dtype, raw)
    A_log, dt_bias = torch.randn(HEADS_V, generator=gen) * 0.5, torch.randn(HEADS_V, generator=gen)
    outs = []
    for step in range(rounds):
        tokens = bs * D
        q, k = (torch.randn(tokens, HEADS, DIM, generator=gen).to(dtype) for _ in range(2))
        v = torch.randn(tokens, HEADS_V, DIM, generator=gen).to(dtype)
        a, b = (torch.randn(tokens, HEADS_V, generator=gen).to(dtype) for _ in range(2))
        accepted = torch.randint(1, D + 1, (bs,), generator=gen, dtype=torch.int32)
        track_steps = torch.stack([torch.randint(-1, int(n), (), generator=gen) for n in accepted])
        indices = torch.tensor(slots, dtype=torch.int32)
        rows = torch.tensor(replay, dtype=torch.int32)
        for layer in range(state["checkpoint"].shape[0]):
            out = torch.zeros(tokens, HEADS_V, DIM, dtype=dtype)
            ring = {name: state[name][layer] if name in state else None for name in ("rawv", "rawk", "beta")}
            verify(
                q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias,
                checkpoint_state=state["checkpoint"][layer], d_cache=state["d"][layer],
                k_cache=state["k"][layer], g_cache=state["g"][layer], rawv_cache=ring["rawv"],
                rawk_cache=ring["rawk"], beta_cache=ring["beta"], out=out,
                query_start_loc=torch.arange(0, tokens + 1, D, dtype=torch.int32), ssm_state_indices=indices,
                replay_indices=rows, write_pos=state["write_pos"], cache_base=state["cache_base"],
                is_flush=state["is_flush"], max_cache_len=L, max_spec_len=D, scale=DIM**-0.5,
                use_qk_l2norm_in_kernel=True, null_block_id=-1, launch_mode="both" if raw else "verify",
            )  # fmt: skip
            outs.append(out)
        advance(
            write_pos=state["write_pos"], cache_base=state["cache_base"], is_flush=state["is_flush"],
            num_accepted=accepted, replay_indices=rows, max_cache_len=L, max_spec_len=D,
            fold_every_commit=False, null_block_id=-1,
        )  # fmt: skip
        if raw:  # the exact-fold mode folds inside the verify: no compact commit
            continue
        commit(
            checkpoint_state=state["checkpoint"], d_cache=state["d"], k_cache=state["k"], g_cache=state["g"],
            d_residual_cache=state.get("rawv"), k_residual_cache=state.get("rawk"),
            state_batch_indices=indices, replay_indices=rows, write_pos=state["write_pos"],
            cache_base=state["cache_base"], is_flush=state["is_flush"], accept_lens=accepted,
            mamba_track_indices=torch.tensor([1, -1, 4] + [2] * null_row, dtype=torch.int32),
            mamba_steps_to_track=track_steps, null_block_id=-1,
        )  # fmt: skip
        if step == 0:  # a row flagged for flush at verify time: the kernel leaves its output alone
            state["is_flush"][replay[1]] = 1
    return outs, state


def interpreter_bf16_dot_error() -> float:
    """|tl.dot(x, y) - x @ y| for 16x16 bfloat16 tiles, under this interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def dot(x, y, o, N: tl.constexpr):
        r = tl.arange(0, N)
        tile = r[:, None] * N + r[None, :]
        tl.store(o + tile, tl.dot(tl.load(x + tile), tl.load(y + tile)))

    x, y = (torch.randn(16, 16).to(torch.bfloat16) for _ in range(2))
    out = torch.empty(16, 16)
    dot[(1,)](x, y, out, N=16)
    return float((out - x.float() @ y.float()).abs().max())


def main():
    from sglang.kernels.ops.attention.linear import gdn_replayssm_spec_decode as sglang

    from dflash_sglang.cpu.gated_deltanet import replayssm as ours

    def bound(hook):
        return lambda **kw: hook(None, **kw)

    report = {"interpreter_bf16_dot_error": interpreter_bf16_dot_error()}
    bf16_dot_ok = report["interpreter_bf16_dot_error"] < 1e-3
    our_kernels = tuple(
        bound(hook) for hook in (ours.gdn_replayssm_spec_decode_on_cpu, ours.commit_gdn_replayssm_spec_on_cpu,
                                 ours.commit_gdn_replayssm_circular_on_cpu)
    )  # fmt: skip
    for name, case in CASES.items():
        sglang_commit = sglang.commit_gdn_replayssm_circular
        if case.get("dtype") == torch.bfloat16 and not bf16_dot_ok:
            sglang_commit = our_kernels[2]
        sglang_kernels = (sglang.gdn_replayssm_spec_decode, sglang.commit_gdn_replayssm_spec, sglang_commit)
        (outs_s, state_s), (outs_o, state_o) = (run_case(k, **case) for k in (sglang_kernels, our_kernels))
        diffs = [float((s.float() - o.float()).abs().max()) for s, o in zip(outs_s, outs_o, strict=True)]
        report[f"{name} out max diff"] = max(diffs)
        report[f"{name} out max abs"] = max(float(s.float().abs().max()) for s in outs_s)
        for key in ("checkpoint", "d", "k", "g", "rawv", "rawk", "beta"):
            if key in state_s:
                diff = (state_s[key].float() - state_o[key].float()).abs().max()
                report[f"{name} {key} max diff"] = float(diff)
        for high, low in (("d", "rawv"), ("k", "rawk")):  # a compact record: its high + low parts
            if low in state_s and "beta" not in state_s:
                whole_s, whole_o = (st[high].float() + st[low].float() for st in (state_s, state_o))
                report[f"{name} {high} high+low max diff"] = float((whole_s - whole_o).abs().max())
        cursors = all(torch.equal(state_s[c], state_o[c]) for c in ("write_pos", "cache_base", "is_flush"))
        report[f"{name} cursors equal"] = cursors
        report[f"{name} cursors"] = [state_s[c].tolist() for c in ("write_pos", "cache_base", "is_flush")]
        compared = not case.get("raw") and sglang_commit is sglang.commit_gdn_replayssm_circular
        report[f"{name} sglang commit compared"] = compared
    print(json.dumps(report))


if __name__ == "__main__":
    main()
