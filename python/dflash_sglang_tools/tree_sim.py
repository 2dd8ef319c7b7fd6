"""Offline tau simulator: how many tokens per verify step would trees win over the chain? CPU, no engine.

    python -m dflash_sglang_tools.tree_sim --pair python/dflash_sglang/assets/tiny-pair --block 8 \\
        --budgets 8,16,32,64 [--prompts N] [--max-new 64] [--topk K] [--json OUT]

At temperature 0 a verify step accepts the longest prefix of the target's greedy continuation that
lies on a root path of the drafted tree (or chain). So the target runs once per prompt (its greedy
continuation and its features at every position), then each configuration replays its own rounds:
draft at the current root, match against the continuation, advance by the accepted length + 1.
Per configuration: tau (tokens per verify step, bonus included, as SGLang's spec_accept_length)
and tau per verified token (the verify width: B for the chain, budget + 1 for a tree). The rank
probe records, on the chain's rounds, the rank of the target's token in the drafter's q_d at each
depth d: a tree can only win where the true token often ranks 2nd..Kth.

The numbers equal `reference.dflash_generate`'s greedy accept lengths (tests/test_tree_reference.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from dflash_sglang.drafter.context import DraftContextCache, target_features
from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import propose
from dflash_sglang.sampling.accept import accepted_prefix_length
from dflash_sglang.tree.build import build_tree, follow

RANK_BUCKETS = (1, 2, 4, 8, 16, 64)  # the probe reports P(rank < k) for these k


@dataclasses.dataclass
class Trace:
    """A prompt and the target's greedy continuation, with the target's features at every position."""

    tokens: list[int]  # prompt + continuation
    prompt_len: int
    features: torch.Tensor  # [1, len(tokens), K*D]

    @property
    def new_tokens(self) -> int:
        return len(self.tokens) - self.prompt_len


@torch.no_grad()
def greedy_trace(target, layer_ids, prompt: list[int], max_new: int, stops=()) -> Trace:
    tokens = list(prompt)
    out = target(torch.tensor([tokens]), use_cache=True, logits_to_keep=1)
    for _ in range(max_new):
        tokens.append(int(out.logits[0, -1].argmax()))
        if tokens[-1] in stops:
            break
        out = target(torch.tensor([tokens[-1:]]), past_key_values=out.past_key_values, use_cache=True)
    hidden = target(torch.tensor([tokens]), output_hidden_states=True, logits_to_keep=1).hidden_states
    return Trace(tokens, len(prompt), target_features(hidden, layer_ids))


@torch.no_grad()
def replay(
    target,
    draft: DFlashDraftModel,
    trace: Trace,
    block: int,
    budget: int | None = None,
    topk: int | None = None,
    ranks: list[list[int]] | None = None,
) -> list[int]:
    """Tokens per verify step over the trace: the chain (`budget` None) or a DDTree of `budget` nodes.

    `ranks`, when given (one list per depth), receives the rank of the target's token in q_d at
    every round."""
    config = draft.config
    seq, end = trace.tokens, len(trace.tokens)
    cache = DraftContextCache(config.num_hidden_layers)
    start, context_from, lengths = trace.prompt_len, 0, []
    while start + 1 < end:  # the token at `start` is emitted; the target has not seen it yet
        positions = torch.arange(start, start + block).view(1, -1)
        block_ids = torch.full((1, block), config.mask_token_id)
        block_ids[0, 0] = seq[start]
        context = trace.features[:, context_from:start]
        context_positions = torch.arange(context_from, start).view(1, -1)
        logits = propose(target, draft, block_ids, positions, context, context_positions, cache)[0][0]
        context_from = start
        # truth[d]: the target's greedy token after the root and d drafts (-1 past the trace: no match)
        truth = torch.tensor([seq[i] if i < end else -1 for i in range(start + 1, start + block + 1)])
        if budget is None:
            matched = int(accepted_prefix_length((logits.argmax(-1) == truth[:-1]).view(1, -1)))
        else:
            tree = build_tree(seq[start], torch.log_softmax(logits.float(), -1), budget, topk)
            matched = int(tree.depths[follow(tree, truth[tree.depths]).last])
        if ranks is not None:
            record_ranks(logits, truth[:-1], ranks)
        step = min(matched + 1, end - 1 - start)  # the last step stops at the trace's end, as decoding does
        lengths.append(step)
        start += step
    return lengths


def record_ranks(logits: torch.Tensor, truth: torch.Tensor, ranks: list[list[int]]) -> None:
    """Append, per depth, how many tokens the drafter ranks above the target's."""
    valid = truth >= 0
    true_logit = logits.gather(-1, truth.clamp_min(0).unsqueeze(-1))
    above = (logits > true_logit).sum(-1)
    for depth in range(logits.shape[0]):
        if valid[depth]:
            ranks[depth].append(int(above[depth]))


def summarize(lengths: list[int], width: int, chain_tau: float | None) -> dict:
    tau = sum(lengths) / max(len(lengths), 1)
    summary = {
        "width": width,
        "steps": len(lengths),
        "tokens": sum(lengths),
        "tau": round(tau, 4),
        "tau_per_verified_token": round(tau / width, 4),
    }
    if chain_tau:
        summary["gain_over_chain"] = round(tau / chain_tau - 1, 4)
    return summary


def rank_summary(ranks: list[list[int]]) -> list[dict]:
    rows = []
    for depth, values in enumerate(ranks, start=1):
        if not values:
            continue
        r = torch.tensor(values, dtype=torch.float64)
        row = {"depth": depth, "n": len(values), "median": float(r.median())}
        row["p90"] = float(r.quantile(0.9))
        row.update({f"top{k}": round(float((r < k).double().mean()), 4) for k in RANK_BUCKETS})
        rows.append(row)
    return rows


def simulate(target, draft, prompts, block: int, budgets, topk=None, max_new: int = 64, stops=()) -> dict:
    layer_ids = draft.config.target_layer_ids
    traces = [greedy_trace(target, layer_ids, p, max_new, stops) for p in prompts]
    ranks: list[list[int]] = [[] for _ in range(block - 1)]
    chain = [n for t in traces for n in replay(target, draft, t, block, ranks=ranks)]
    configs = {"chain": summarize(chain, block, None)}
    for budget in budgets:
        lengths = [n for t in traces for n in replay(target, draft, t, block, budget, topk)]
        configs[f"tree{budget}"] = summarize(lengths, budget + 1, configs["chain"]["tau"])
    return {
        "block": block,
        "budgets": list(budgets),
        "topk": topk,
        "prompts": len(prompts),
        "max_new": max_new,
        "configs": configs,
        "rank_probe": rank_summary(ranks),
    }


def format_report(report: dict) -> str:
    lines = [
        f"block {report['block']}, {report['prompts']} prompts, max_new {report['max_new']}, "
        f"topk {report['topk']}",
        "",
        "| config | verify width | tau | tau / width | vs chain |",
        "|---|---|---|---|---|",
    ]
    for name, c in report["configs"].items():
        gain = f"{c['gain_over_chain']:+.1%}" if "gain_over_chain" in c else ""
        lines.append(
            f"| {name} | {c['width']} | {c['tau']:.3f} | {c['tau_per_verified_token']:.3f} | {gain} |"
        )
    keys = [f"top{k}" for k in RANK_BUCKETS]
    lines += [
        "",
        "rank of the target's token in q_d (chain rounds)",
        "",
        "| depth | n | median | p90 | " + " | ".join(f"P(rank<{k})" for k in RANK_BUCKETS) + " |",
        "|---" * (4 + len(keys)) + "|",
    ]
    for row in report["rank_probe"]:
        shares = [f"{row[k]:.3f}" for k in keys]
        cells = [row["depth"], row["n"], f"{row['median']:g}", f"{row['p90']:g}", *shares]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def load_pair(pair: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(pair / "target", dtype=torch.float32).eval()
    draft = DFlashDraftModel.from_pretrained(pair / "draft", dtype=torch.float32)
    return target, draft, AutoTokenizer.from_pretrained(pair / "target")


def held_out_prompt_ids(pair: Path, tokenizer, count: int | None) -> list[list[int]]:
    from .bench.tiny_prompts import held_out_file
    from .train.data import prompt_ids, read_jsonl

    found = held_out_file(pair)
    if found is None:
        raise FileNotFoundError(f"no held-out prompts (*held*out*.json*) in {pair}")
    return [prompt_ids(tokenizer, p["instruction"]) for p in read_jsonl(found)[:count]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", type=Path, required=True, help="directory with target/ and draft/")
    parser.add_argument("--block", type=int, default=8, help="block size B (the chain verifies B tokens)")
    parser.add_argument("--budgets", default="8,16,32,64", help="tree budgets (draft nodes), comma separated")
    parser.add_argument("--topk", type=int, default=None, help="at most this many children per node")
    parser.add_argument(
        "--prompts", type=int, default=None, help="the first N held-out prompts (default: all)"
    )
    parser.add_argument("--max-new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target, draft, tokenizer = load_pair(args.pair)
    prompts = held_out_prompt_ids(args.pair, tokenizer, args.prompts)
    budgets = [int(b) for b in args.budgets.split(",")]
    stops = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    report = simulate(target, draft, prompts, args.block, budgets, args.topk, args.max_new, stops)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
