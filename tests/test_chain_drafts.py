"""The plain drafter kind draws only the drafts the step verifies (step/chain_drafts.py, issue 64):
an exploring width-2 step pays one LM-head row a request, not B - 1. Engine-free: a random LM head
stands in for the target's, one rank."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from dflash_sglang.step import chain_drafts
from dflash_sglang.step.chain_drafts import PlainDrafts

B, H, V = 8, 16, 50


def drafts_at(width, monkeypatch):
    """The drafts of a greedy batch of 3 at `width`, the whole block's argmax, and the rows the LM
    head was asked for (chain_drafts' vocab_parallel_argmax, counted)."""
    torch.manual_seed(0)
    lm_head = torch.nn.Linear(H, V, bias=False)
    rows, argmax = [], chain_drafts.vocab_parallel_argmax
    monkeypatch.setattr(
        chain_drafts,
        "vocab_parallel_argmax",
        lambda hidden, *a: rows.append(len(hidden)) or argmax(hidden, *a),
    )
    kind = PlainDrafts(SimpleNamespace(lm_head=lm_head, group=None), tp=None, sampled=True, vocab=V)
    hidden = torch.randn(3, B, H)
    greedy = SimpleNamespace(sampling_info=None, reqs=[])
    with torch.no_grad():
        drafts, proposal = kind(hidden, torch.zeros(3, dtype=torch.int64), greedy, width)
        full = (hidden[:, 1:] @ lm_head.weight.T).argmax(-1)
    return drafts, proposal, full, sum(rows)


def test_a_step_of_width_w_draws_w_minus_1_drafts_a_request(monkeypatch):
    for width in (2, 3, B):
        drafts, proposal, full, rows = drafts_at(width, monkeypatch)
        assert drafts.shape == (3, width - 1) and proposal is None  # greedy: point drafts
        assert rows == 3 * (width - 1)  # the LM head's rows: the verified drafts only
        assert torch.equal(drafts, full[:, : width - 1])  # the block's first drafts, unchanged


def test_the_whole_block_without_a_width_and_none_at_width_1(monkeypatch):
    drafts, _, full, _ = drafts_at(None, monkeypatch)
    assert torch.equal(drafts, full)
    drafts, proposal, _, products = drafts_at(1, monkeypatch)  # a draft window's plain step ran the drafter
    assert drafts.shape == (3, 0) and proposal is None and products == 0  # no LM-head product at all
