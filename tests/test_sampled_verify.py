"""Sampled verification without dense probabilities (sampled_verify, target_law) has the dense
path's law exactly: per-draft acceptance probabilities and the final token's distribution equal
those of target_distribution + rejection_accept, analytically, for every combination of
temperature / top-k / top-p / min-p with greedy rows mixed in, whichever passes the batch's
parameters select (top-k window, sort, min-p threshold). Plus a chi-square test of sampled
steps with negative controls."""

from itertools import product
from types import SimpleNamespace

import pytest
import torch
from scipy import stats

from dflash_sglang.sampling import target_law
from dflash_sglang.sampling.distribution import target_distribution
from dflash_sglang.sampling.sampled_verify import draft_probs, final_probs, sampled_accept
from dflash_sglang.sampling.target_law import plan_for, row_laws

TOP_K_ALL = 1 << 30  # SGLang's "no top-k"
FLOAT32 = dict(rtol=1e-5, atol=1e-6)  # both paths compute in float32, in different orders
BLOCK, VOCAB = 4, 12
COMBOS = list(product((0.7, 1.3), (1, 3, 5, TOP_K_ALL), (1.0, 0.6), (0.0, 0.2)))


def batch_info(params, max_top_k=None):
    """A SamplingBatchInfo stand-in with SGLang's host flags; params: (T, top_k, top_p, min_p)."""
    column = list(zip(*params, strict=True))
    return SimpleNamespace(
        temperatures=torch.tensor(column[0]).view(-1, 1),
        top_ks=torch.tensor(column[1], dtype=torch.int32),
        top_ps=torch.tensor(column[2]),
        min_ps=torch.tensor(column[3]),
        is_all_greedy=all(k <= 1 for k in column[1]),
        need_top_k_sampling=any(k != TOP_K_ALL for k in column[1]),
        need_top_p_sampling=any(p != 1.0 for p in column[2]),
        need_min_p_sampling=any(m > 0 for m in column[3]),
        max_top_k=max_top_k,
    )


def requests(params):
    return [SimpleNamespace(sampling_params=SimpleNamespace(top_k=k, top_p=p)) for _, k, p, _ in params]


def residual(p_at, draft):
    """The dense rule: normalise(max(p - onehot(d), 0)), p itself when that is empty."""
    r = (p_at - torch.nn.functional.one_hot(draft, p_at.shape[-1]).to(p_at)).clamp_min(0)
    return r / r.sum() if r.sum() > 0 else p_at


def case(params, seed, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(params) * BLOCK, VOCAB, generator=g) * spread
    # Drafts: the argmax, a likely token, and tokens a filter removes, all represented.
    ranks = torch.randint(0, 6, (len(params), BLOCK - 1), generator=g)
    order = logits.view(len(params), BLOCK, VOCAB)[:, :-1].argsort(-1, descending=True)
    drafts = order.gather(-1, ranks.unsqueeze(-1)).squeeze(-1)
    return logits, drafts


PLANS = {  # the same batch through each pass the host can pick
    "sort (no host bound)": lambda params: (batch_info(params), None),
    "window + sort (requests' bound)": lambda params: (batch_info(params), requests(params)),
}


@pytest.mark.parametrize("how", sorted(PLANS))
def test_law_equals_the_dense_law_for_all_combinations(how, monkeypatch):
    monkeypatch.setattr(target_law, "CHUNK_BYTES", 4 * VOCAB * 5)  # 5-row chunks: chunk edges
    for seed in range(3):
        check_law(COMBOS, seed, *PLANS[how](COMBOS))


def test_law_with_bounded_top_k_uses_the_window_only():
    params = [c for c in COMBOS if c[1] != TOP_K_ALL]
    info = batch_info(params, max_top_k=5)
    plan = plan_for(info, VOCAB)
    assert (plan.window, plan.sort) == (5, False)
    for seed in range(3):
        check_law(params, seed, info, None)


def test_law_temperature_only_and_greedy_mix_needs_no_sort():
    params = [(0.8, TOP_K_ALL, 1.0, 0.0), (1.0, 1, 1.0, 0.0), (1.2, TOP_K_ALL, 1.0, 0.0)]
    info = batch_info(params)
    assert plan_for(info, VOCAB, requests(params)) == target_law.LawPlan(1, False, False, False)
    only_t = [params[0], params[2]]
    assert plan_for(batch_info(only_t), VOCAB, requests(only_t)) == target_law.LawPlan(0, False, False, False)
    for seed in range(3):
        check_law(params, seed, info, requests(params))
        check_law(only_t, seed, batch_info(only_t), requests(only_t))


def check_law(params, seed, info, reqs):
    logits, drafts = case(params, seed)
    before = logits.clone()
    dense = target_distribution(logits, info, BLOCK).double()
    law = row_laws(logits, info, BLOCK, plan_for(info, VOCAB, reqs))
    p_draft = draft_probs(law, logits, drafts)
    want = dense[:, :-1].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(p_draft.double(), want, **FLOAT32)
    for a in range(BLOCK):
        accepted = torch.full((len(params),), a)
        got = final_probs(law, logits, drafts, accepted, p_draft).double()
        for i in range(len(params)):
            want = residual(dense[i, a], drafts[i, a]) if a < BLOCK - 1 else dense[i, a]
            torch.testing.assert_close(
                got[i], want, **FLOAT32, msg=lambda m, i=i, a=a: f"{params[i]} at {a}: {m}"
            )
    assert torch.equal(logits, before)  # the request outputs read the logits after verify


def exact_step_law(p, drafts, skip_residual=False):
    """{(length, emitted token): probability} of one step with point drafts, from dense p [B, V]."""
    law, reach = {}, 1.0
    for a in range(BLOCK):
        final = p[a] if a == BLOCK - 1 or skip_residual else residual(p[a], drafts[a])
        stop = 1.0 if a == BLOCK - 1 else 1.0 - p[a, drafts[a]].item()
        for x in range(VOCAB):
            law[(a + 1, x)] = reach * stop * final[x].item()
        if a < BLOCK - 1:
            reach *= p[a, drafts[a]].item()
    return law


def chi_square_pvalue(counts, law, n):
    cells = [k for k, v in law.items() if v * n >= 5]
    observed = [counts.get(k, 0) for k in cells]
    expected = [law[k] * n for k in cells]
    rest_observed, rest_expected = n - sum(observed), n - sum(expected)
    if rest_expected < 1e-6:  # (almost) all the law's mass is in the cells
        if rest_observed:
            return 0.0  # outcomes the law gives (almost) no probability
    else:
        observed.append(rest_observed)
        expected.append(rest_expected)
    return stats.chisquare(observed, expected, sum_check=False).pvalue


@pytest.mark.parametrize("param", [(0.9, TOP_K_ALL, 0.8, 0.1), (1.1, 4, 1.0, 0.0), (0.7, 1, 1.0, 0.0)])
def test_sampled_steps_follow_the_law_with_negative_controls(param):
    n = 40_000
    logits, drafts = case([param], seed=7, spread=1.0)
    drafts[0, 0] = logits[0].argmax()  # reach past the first position
    info = batch_info([param] * n)
    g = torch.Generator().manual_seed(1)
    lengths, tokens = sampled_accept(drafts.expand(n, -1), logits.repeat(n, 1), info, BLOCK, generator=g)
    emitted = tokens.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
    accepted = torch.arange(BLOCK - 1) < lengths.unsqueeze(1) - 1
    assert torch.equal(tokens[:, :-1][accepted], drafts.expand(n, -1)[accepted])  # emitted as drafted
    counts = {}
    for key in zip(lengths.tolist(), emitted.tolist(), strict=True):
        counts[key] = counts.get(key, 0) + 1
    p = target_distribution(logits, batch_info([param]), BLOCK)[0].double()
    law = exact_step_law(p, drafts[0])
    if param[1] == 1:  # greedy: one outcome, every time
        assert counts == {max(law, key=law.get): n}
        return
    assert chi_square_pvalue(counts, law, n) > 1e-3
    # Negative controls: the same samples against a law without the draft removed on rejection,
    # and against another temperature, must be rejected.
    assert chi_square_pvalue(counts, exact_step_law(p, drafts[0], skip_residual=True), n) < 1e-6
    hotter = target_distribution(logits, batch_info([(param[0] * 1.3, *param[1:])]), BLOCK)[0].double()
    assert chi_square_pvalue(counts, exact_step_law(hotter, drafts[0]), n) < 1e-6


@pytest.mark.parametrize("how", sorted(PLANS))
def test_no_host_reads_of_device_data(how):
    """The overlap worker runs this inside a step: nothing may read device data on the host."""
    from dflash_sglang.runtime.host_sync import DeviceDataGuard

    logits, drafts = case(COMBOS, seed=0)
    info, reqs = PLANS[how](COMBOS)
    params = [info.temperatures, info.top_ks, info.top_ps, info.min_ps]
    with DeviceDataGuard([logits, drafts, *params]):
        sampled_accept(drafts, logits, info, BLOCK, reqs=reqs)


def test_a_width_one_step_samples_the_target_law_with_no_drafts():
    """Verify width 1 (plain decoding through the verify path, width/controller.py): no drafts, one
    token drawn from the target's law at the verified position."""
    n, param = 20_000, (0.9, TOP_K_ALL, 0.8, 0.1)
    logits, _ = case([param], seed=3, spread=1.0)
    row = logits[:1]
    g = torch.Generator().manual_seed(2)
    lengths, tokens = sampled_accept(
        torch.empty(n, 0, dtype=torch.int64), row.repeat(n, 1), batch_info([param] * n), 1, generator=g
    )
    assert lengths.eq(1).all() and tokens.shape == (n, 1)
    counts = torch.bincount(tokens[:, 0], minlength=VOCAB).double()

    def pvalue(law_param) -> float:
        p = target_distribution(row, batch_info([law_param]), 1)[0, 0].double()
        keep = p * n >= 5
        observed = torch.cat([counts[keep], (n - counts[keep].sum()).view(1)])
        expected = torch.cat([p[keep] * n, (n - p[keep].sum() * n).view(1)])
        return stats.chisquare(observed.numpy(), expected.numpy()).pvalue

    assert pvalue(param) > 1e-3
    assert pvalue((0.9, TOP_K_ALL, 1.0, 0.0)) < 1e-6  # control: the filters dropped
