"""The sampled law on every decoding path: one place every path registers in (PATHS), one check
every path's test calls (`assert_every_setting_follows_the_law`).

Each path's server gets one batch mixing SETTINGS (real temperatures and filters, several verify
steps per request). For each setting, the completions are tested against the target's own law,
computed independently of our worker: the target model's logits (transformers, float64), the
penalty as SGLang's penalizer applies it, the temperature, then SGLang's own no-spec filter
(`top_k_top_p_min_p_sampling_from_probs_torch`, the CPU sampler). Three tests, any of which fails
the setting:
- no token may fall outside the filter's support (relaxed by a hair for float32 against float64);
- the sequential probability integral transform (`pit_pvalue`): every token's u given its prefix
  is uniform exactly when the completions follow the law;
- the likelihood ratio against the laws of the classic bugs of speculative sampling
  (law_statistics.py; with `drafter`, against each draft's mass too: law_drafts.py reads the
  drafts back), and against the law of the next token given the prefix learned from the
  completions that share it (law_omnibus.py: no bug named; `first` asks for short completions
  for it). This is where the power is: docs/reliability.md has the rates at which each planted
  bug (tests/planted/) is caught.
The PIT and the ratio are Bonferroni-combined, and PASS splits 1e-4 among the settings, so a
path's check raises a false alarm at most once in 10,000 runs. Each setting also has a negative
control, the law with its filter (or penalty) dropped, that the same completions must fail: it
shows the filter did something on that path (PIT and the likelihood ratio of law to control, by
Ville's inequality; a top_p of 0.9 at T0.6 cuts little of a peaked target's mass, so its control
also moves the temperature). It says nothing of the power against a wrong sampler: the planted
bugs do. The p-values of every run are printed as a matrix at the end of the session
(conftest.py).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import torch
from scipy import stats
from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch

from .law_drafts import read_blocks
from .law_joint import joint_log_ratios, mean_pvalue
from .law_omnibus import omnibus_log_ratio, omnibus_pvalue
from .law_pattern import joint_group, recorded_steps
from .law_prompts import most_powerful, most_uncertain  # noqa: F401 - law_case and the tests import them here
from .law_sampled import SampledDrafter, sampled_log_ratios
from .law_statistics import likelihood_ratio_pvalue

# Every decoding path and the test module whose server runs it (docs/features.md cites these).
PATHS = {
    "chain, sampled drafts, overlap worker": "test_worker.py",
    "chain, point drafts, plain worker": "test_worker.py",
    "chain, sampled drafts, block verification, per-request lengths, plain worker": "test_sampled_drafts.py",
    "DFlash2 drafter (trained), sampled walk, overlap worker": "test_sampled_drafts.py",
    "tree 16 nodes, overlap worker": "test_tree.py",
    "tree 32 nodes, plain worker": "test_tree.py",
    "tree 16 nodes, overlap worker, trained pair": "test_tree.py",
    "tree 8 nodes, TP=2, overlap worker": "test_tree.py",
    "tree, forced per-request lengths": "test_tree_widths.py",
    "tree, adaptive per-request budgets": "test_tree_widths.py",
    "chain, forced per-request lengths": "test_verify_width.py",
    "chain, adaptive width (per-request lengths)": "test_verify_width.py",
    "hybrid extra_buffer, overlap worker, constant drafts": "test_hybrid_worker.py",
    "hybrid tree 16 nodes, extra_buffer, overlap worker": "test_hybrid_tree.py",
    "hybrid tree 32 nodes, no_buffer, plain worker": "test_hybrid_tree.py",
    "hybrid tree 16 nodes through the ring, extra_buffer, plain worker": "test_hybrid_tree.py",
    "hybrid extra_buffer, no radix cache, block 16, overlap worker": "test_hybrid_worker.py",
    "hybrid extra_buffer_lazy, overlap worker, width cycle": "test_hybrid_worker.py",
    "hybrid no_buffer, plain worker, width cycle": "test_hybrid_worker.py",
    "hybrid draft window 12, overlap worker": "test_hybrid_worker.py",
    "hybrid, forced per-request lengths, overlap worker": "test_hybrid_request_lengths.py",
    "draft window, plain worker": "test_draft_window.py",
    "draft window, sliding drafter, overlap worker, width cycle": "test_draft_window.py",
    "TP=2, overlap worker": "test_tp.py",
    "TP=2, overlap worker, trained pair": "test_tp.py",
    "TP=2, plain worker, Laguna + Domino drafter": "test_tp.py",
    "TP=2, plain worker, draft window, per-request lengths": "test_tp.py",
    "DP attention, overlap worker": "test_dp_attention.py",
    "DP attention, plain worker": "test_dp_attention.py",
    "PD, overlap worker, per-request lengths": "test_pd.py",
    "PD, plain worker": "test_pd.py",
    "LoRA, plain worker": "test_lora.py",
    "fp8 draft KV, paged, plain worker": "test_engine_features.py",
    "Laguna drafter with sinks and convolutions, plain worker": "test_drafter_variants.py",
    "DFlash2 drafter with sinks and convolutions, overlap worker": "test_drafter_variants.py",
    "Domino drafter with sinks and convolutions, plain worker": "test_drafter_variants.py",
}


@dataclasses.dataclass(frozen=True)
class Setting:
    params: dict  # SGLang sampling parameters
    control: dict  # the same with the filter or penalty dropped: a law the samples must fail


SETTINGS = {
    "T0.6 top_p0.9": Setting({"temperature": 0.6, "top_p": 0.9}, {"temperature": 1.2}),
    "T1.3 top_k20": Setting({"temperature": 1.3, "top_k": 20}, {"temperature": 1.3}),
    "T1.0 min_p0.1": Setting({"temperature": 1.0, "min_p": 0.1}, {"temperature": 1.0}),
    # 2.0, the API's largest: a penalty one token stale moves the law where a token repeats.
    "T0.8 freq2.0": Setting({"temperature": 0.8, "frequency_penalty": 2.0}, {"temperature": 0.8}),
}
# Each setting's law p-value must be above this: a path's check (every setting) raises a false
# alarm at most once in 10,000 runs.
PASS = 1e-4 / len(SETTINGS)
REJECT = 1e-6  # the control's p-value must be below this
RESULTS: list[dict] = []  # every check of the session, for the matrix conftest.py prints


def sampled_batch(server, prompt: list[int], n: int, max_new: int, extra: dict, batched: bool) -> tuple:
    """({setting: n completions}, {setting: their request ids}), all settings in one batch (a
    mixed batch, as in service); not `batched`: one request a completion, 64 at a time (SGLang's
    PD router takes one prompt a request)."""
    names = [name for name in SETTINGS for _ in range(n)]
    params = [{**SETTINGS[name].params, "max_new_tokens": max_new, "ignore_eos": True} for name in names]
    if batched:
        batch = {key: [value] * len(names) for key, value in extra.items()}
        body = {"input_ids": [prompt] * len(names), "sampling_params": params, **batch}
        outs = server.post("/generate", body)
    else:
        bodies = [{"input_ids": prompt, "sampling_params": p, **extra} for p in params]
        with ThreadPoolExecutor(64) as pool:
            outs = list(pool.map(lambda body: server.post("/generate", body), bodies))
    completions, ids = {name: [] for name in SETTINGS}, {name: [] for name in SETTINGS}
    accepted = dict.fromkeys(SETTINGS, False)
    for name, out in zip(names, outs, strict=True):
        assert len(out["output_ids"]) == max_new
        completions[name].append(out["output_ids"])
        ids[name].append(out["meta_info"].get("id"))
        accepted[name] |= out["meta_info"].get("spec_accept_length", 0) > 1
    assert all(accepted.values()), f"no draft was accepted under {[k for k, v in accepted.items() if not v]}"
    return completions, ids


@torch.no_grad()
def target_logits(model, prompt: list[int], completions: list[list[int]]) -> torch.Tensor:
    """[n, L, V] float64 logits of the target at each completion position, given its prefix."""
    seqs = torch.tensor([prompt + c for c in completions])
    logits = model(seqs).logits[:, len(prompt) - 1 : -1]
    return logits.double()


def relaxed(params: dict) -> dict:
    """The filter loosened by a hair: the server filters float32 probabilities, we float64 ones."""
    out = dict(params)
    if "top_p" in out:
        out["top_p"] = min(1.0, out["top_p"] + 0.02)
    if "min_p" in out:
        out["min_p"] = out["min_p"] * 0.95
    return out


def law(logits: torch.Tensor, completions: torch.Tensor, params: dict) -> torch.Tensor:
    """[n, L, V] logits -> [n, L, V] the probabilities SGLang's no-spec sampler draws from.
    Two keys describe wrong laws for law_statistics.py: `stale_penalty` (the penalty misses the
    token just before) and `filter_untempered` (the filter measured before the temperature)."""
    n, length, vocab = logits.shape
    penalty = params.get("frequency_penalty", 0.0)
    if penalty:  # each position is penalised by the counts of the tokens generated before it
        counts = torch.nn.functional.one_hot(completions, vocab).double().cumsum(1)
        lag = 2 if params.get("stale_penalty") else 1
        logits = logits - penalty * torch.cat([torch.zeros_like(counts[:, :lag]), counts[:, :-lag]], 1)
    probs = torch.softmax(logits / params.get("temperature", 1.0), -1).reshape(-1, vocab)
    measured = torch.softmax(logits, -1).reshape(-1, vocab) if params.get("filter_untempered") else probs
    rows = probs.shape[0]
    top_k = params.get("top_k", vocab)
    _, kept, order, _ = top_k_top_p_min_p_sampling_from_probs_torch(
        measured.clone(),
        torch.full((rows,), top_k if top_k > 0 else vocab),
        torch.full((rows,), params.get("top_p", 1.0), dtype=torch.float64),
        torch.full((rows,), params.get("min_p", 0.0), dtype=torch.float64),
        "min_p" in params,
        None,
        torch.zeros(rows, dtype=torch.long),
        return_filtered_probs=True,
    )
    support = torch.zeros_like(probs).scatter_(-1, order.long(), (kept > 0).double())
    filtered = probs * support
    return (filtered / filtered.sum(-1, keepdim=True)).view(n, length, vocab)


def pit_pvalue(probs: torch.Tensor, completions: torch.Tensor, seed: int = 0) -> float:
    """Sequential randomized PIT + Kolmogorov-Smirnov, for a given law per position:
    u = P(more likely than x) + v * P(x), v ~ U(0, 1), exactly i.i.d. uniform when every token
    follows its law given its prefix (the Rosenblatt transform)."""
    chosen = probs.gather(-1, completions.unsqueeze(-1))
    # Ties ordered by token id: u must cover [0, 1] once, or two tokens of equal probability
    # (a copied head row) would share one interval.
    ids = torch.arange(probs.shape[-1])
    before = (probs > chosen) | ((probs == chosen) & (ids < completions.unsqueeze(-1)))
    below = (probs * before).sum(-1, keepdim=True)
    jitter = torch.rand(chosen.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    u = (below + jitter * chosen).clamp(0, 1)
    return float(stats.kstest(u.flatten().numpy(), "uniform").pvalue)


def outside(support: torch.Tensor, completions: torch.Tensor) -> int:
    """How many tokens fell where the law puts no mass."""
    return int((support.gather(-1, completions.unsqueeze(-1)) == 0).sum())


def control_ratio_pvalue(tested: torch.Tensor, control: torch.Tensor, completions: torch.Tensor) -> float:
    """Under the control law, P(prod tested/control >= 1/p) <= p: p = prod control/tested."""
    chosen = completions.unsqueeze(-1)
    log_ratio = control.gather(-1, chosen).clamp_min(1e-300).log() - tested.gather(-1, chosen).log()
    return float(log_ratio.sum().clamp(max=0.0).exp())


def judge(
    setting: Setting, model, prompt: list[int], completions: list[list[int]], drafter=None, first=None,
    steps=None, first_steps=None,
) -> tuple:  # fmt: skip
    """(p, control p, the failure in words or "") of one setting's completions. p is the smaller,
    Bonferroni-doubled, of the PIT's and the likelihood ratio's against the bugs' own laws
    (law_statistics.py; `drafter`, a law_drafts.ChainDrafter, lets it see the drafts; a
    law_sampled.SampledDrafter adds the laws of a sampled-draft verify's bugs), the omnibus
    law of the next token given the prefix (law_omnibus.py), over `completions` and `first`
    (more completions of the setting, short ones: many share their prefixes), and the joint law
    given the acceptance pattern (law_joint.py; `steps`, `first_steps`: each completion's
    law_pattern.Steps where a record was made; point drafts are read back without one)."""
    tokens, logits, target, support, usable = tested(setting.params, model, prompt, completions)
    stray = outside(support, tokens)
    groups = [(target, tokens, usable)]
    batches = [(completions, (tokens, target, usable), steps)]
    if first:
        short, _, short_target, short_support, short_usable = tested(setting.params, model, prompt, first)
        stray += outside(short_support, short)
        groups.append((short_target, short, short_usable))
        batches.append((first, (short, short_target, short_usable), first_steps))
    omnibus = omnibus_log_ratio(groups)
    state, named = None, []
    if isinstance(drafter, SampledDrafter):  # the drafts unseen: summed out (law_sampled.py)
        named = sampled_log_ratios(law, model, drafter, prompt, completions, setting.params, target, usable)
    elif drafter is not None:
        state = read_blocks(model, drafter, prompt, completions)
    joint = joint_log_ratios([
        joint_group(law, model, drafter, prompt, batch, setting.params, seen, batch_steps,
                    state if k == 0 else read_blocks(model, drafter, prompt, batch) if state else None)
        for k, (batch, seen, batch_steps) in enumerate(batches)
    ])  # fmt: skip
    more = [omnibus, *named, *joint]
    ratio = likelihood_ratio_pvalue(law, logits, tokens, setting.params, target, usable, state, more)
    p = min(1.0, 2 * min(pit_pvalue(target, tokens), ratio)) if not stray else 0.0
    control_law = law(logits, tokens, setting.control)
    statistics = (pit_pvalue(control_law, tokens), control_ratio_pvalue(support, control_law, tokens))
    control = min(1.0, 2 * min(statistics))
    if p > PASS and control < REJECT:
        return p, control, ""
    stray_note = f"; {stray} tokens outside the filter" if stray else ""
    alone = likelihood_ratio_pvalue(law, logits, tokens, setting.params, target, usable, state, named)
    parts = (
        f"omnibus alone {omnibus_pvalue(omnibus):.3g}, the bugs' laws alone {alone:.3g}, "
        f"the joint law alone {mean_pvalue(joint):.3g}"
    )
    return (
        p,
        control,
        f"p {p:.3g} (must be > {PASS:.2g}{stray_note}; {parts}), control {control:.3g} (< {REJECT})",
    )


def tested(params: dict, model, prompt: list[int], completions: list[list[int]]) -> tuple:
    """(tokens, logits, the tested law, its support relaxed, the positions counted: where float32
    and float64 filters agree on the support) of completions of one length."""
    tokens = torch.tensor(completions)
    logits = target_logits(model, prompt, completions)
    target, support = law(logits, tokens, params), law(logits, tokens, relaxed(params))
    return tokens, logits, target, support, ((target > 0) == (support > 0)).all(-1)


def assert_follows_the_law(setting: Setting, model, prompt: list[int], completions: list[list[int]]) -> None:
    """One setting's completions (sampled elsewhere) pass against the law and fail its control."""
    _, _, failure = judge(setting, model, prompt, completions)
    assert not failure, failure


def assert_every_setting_follows_the_law(
    path: str, server, model, prompts: list[list[int]], n: int = 32, max_new: int = 24,
    extra: dict | None = None, batched: bool = True, drafter=None, first: int = 0,
) -> None:  # fmt: skip
    """Every setting's completions pass against the target's law and fail against its control
    (`extra`: request fields every request carries, such as a LoRA adapter's name; `drafter`: the
    chain's drafter, law_drafts.ChainDrafter, for the tests that watch the drafts; `first`: that
    many more completions a setting, one block long, for the omnibus, law_omnibus.py). A server
    that records its steps (step_records.record_env) gives the judge each completion's acceptance
    pattern (law_pattern.recorded_steps)."""
    assert path in PATHS, f"register {path!r} in law_matrix.PATHS"
    prompt = most_uncertain(model, prompts)
    failures = []
    short, short_ids = dict.fromkeys(SETTINGS), dict.fromkeys(SETTINGS)
    if first:  # the prefill's token and one block's drafts
        short, short_ids = sampled_batch(
            server, prompt, first, getattr(drafter, "block_size", 4), extra or {}, batched
        )
    batches, ids = sampled_batch(server, prompt, n, max_new, extra or {}, batched)
    for name, completions in batches.items():
        steps, first_steps = recorded_steps(server, ids[name]), recorded_steps(server, short_ids[name])
        p, control, failure = judge(
            SETTINGS[name], model, prompt, completions, drafter, short[name], steps, first_steps
        )
        RESULTS.append({"path": path, "setting": name, "p": p, "control": control})
        if failure:
            failures.append(f"{name}: {failure}")
    assert not failures, f"{path}: " + "; ".join(failures)


def matrix_lines() -> list[str]:
    """The session's results as a table: one row a path, p-value / control p-value per setting."""
    if not RESULTS:
        return []
    header = "| path | " + " | ".join(SETTINGS) + " |"
    lines = [header, "|" + "---|" * (len(SETTINGS) + 1)]
    for path in [p for p in PATHS if any(r["path"] == p for r in RESULTS)]:
        cells = {r["setting"]: f"{r['p']:.2g} / {r['control']:.1g}" for r in RESULTS if r["path"] == path}
        lines.append(f"| {path} | " + " | ".join(cells.get(s, "") for s in SETTINGS) + " |")
    missing = [p for p in PATHS if not any(r["path"] == p for r in RESULTS)]
    if missing:
        lines.append(f"not run in this session: {', '.join(missing)}")
    return lines
