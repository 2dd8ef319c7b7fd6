"""The T > 0 verify's extra memory is bounded (issue 57, item 4): at most target_law.EXTRA_BYTES
(128 MiB) beside the logits themselves (the target's verify logits, the drafter's logits for q)
at batch 64 and V 248,320, block 16 and 64-node trees; and chunking changes no result.

Engine-free, CPU. The final draw (point drafts, sampled drafts token by token or as a block),
block verification's residual masses and the tree's draw at every node run over row chunks sized
by `target_law.rows_within`. Three kinds of check:
- the sizes: at the issue's shapes, each pass's chunk times its measured temporaries fits;
- the measure: torch's profiler records every CPU allocation (bench/verify_memory.py), and each
  path's peak above its inputs stays within a budget set small at a moderate shape, in float32
  and bfloat16 logits; unchunked, the same calls exceed it (so the chunks did the work);
- the results: at a small vocabulary with a budget of one row a chunk (several chunks run), the
  same acceptance and tokens under the same generator, the same masses, the same tree draws; and
  no host read of device data (the overlap worker runs this inside a step).
"""

from __future__ import annotations

import pytest
import torch

from dflash_sglang.runtime.host_sync import DeviceDataGuard
from dflash_sglang.sampling import sampled_verify, target_law
from dflash_sglang.sampling.sampled_drafts import CandidateProposal, draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept
from dflash_sglang.sampling.target_law import rows_within
from dflash_sglang_tools.bench.verify_memory import budget, measure
from tests.planted.simulate import sampling_info

MIB = 1 << 20
FILTERS = [{"temperature": 0.6, "top_k": 20, "top_p": 0.95}, {"temperature": 1.0, "min_p": 0.05}]


@pytest.mark.parametrize("vocab", [151_936, 248_320])
def test_every_chunk_fits_the_bound_at_the_issues_shapes(vocab):
    assert target_law.EXTRA_BYTES == 128 * MIB
    bs, nodes = 64, 64  # block 16: 64 requests; trees: 64 nodes each
    unit = 4 * vocab  # one float32 row
    # Residual masses, point drafts' final draw, the tree's draw: chunks of requests or nodes.
    for rows in (bs, bs * nodes):
        step = rows_within(vocab)
        assert step >= 1 and target_law.TEMPORARIES * min(step, rows) * unit <= 128 * MIB
    # Sampled drafts: q's rows at the rejected positions are held while the chunks run.
    held = bs * unit
    step = rows_within(vocab, held)
    assert held + target_law.TEMPORARIES * step * unit <= 128 * MIB and step >= 1
    # Before: block verification's q logits alone were [bs * (B-1), V] float32 (kept, exempt), and
    # the tree's draw scaled all its [bs * nodes, V] rows at once, a few such tensors.
    assert bs * nodes * unit > 18 * 128 * MIB


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_measured_peak_stays_within_a_small_budget(dtype):
    bs, block, vocab = 16, 8, 4096
    unit = bs * vocab * 4  # [bs, V] float32: 256 KiB
    small = 2 * unit
    peaks = measure(bs, block, vocab, small, dtype=dtype)
    assert set(peaks) == {"point", "sampled", "block", "tree_draw"}
    for name, peak in peaks.items():
        assert 0 < peak <= small, (name, peak / unit)
    whole = measure(bs, block, vocab, 1 << 62, dtype=dtype)  # one chunk: the unbounded form
    assert whole["tree_draw"] > 4 * small  # [bs * B, V] rows at once
    for name in ("point", "sampled", "block"):
        assert whole[name] > small, (name, whole[name] / unit)
        # The constant behind the chunk size: peak temporaries of one [rows, V] chunk (sampled
        # drafts also hold q's rejected rows, one unit).
        held = 0 if name == "point" else unit
        assert whole[name] - held <= target_law.TEMPORARIES * unit * 0.8, (name, whole[name] / unit)


BS, BLOCK, V, H = 12, 6, 300, 32


def step_inputs(params: dict, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(V, H, generator=g) / H**0.5
    features = torch.randn(BS, BLOCK - 1, H, generator=g) * 4
    logits = torch.randn(BS, BLOCK, V, generator=g)
    logits[:, :-1] += features @ weight.T  # the target near the drafter: drafts are accepted
    info = sampling_info(params, BS)
    drafts, proposal = draw_drafts(features, lambda x: (x @ weight.T).float(), info, V, generator=g)
    return logits.view(BS * BLOCK, V), info, drafts, proposal


def candidate_proposal(seed: int = 0, k: int = 4):
    """DFlash2's q: K candidates a position, zero elsewhere."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(BS, BLOCK - 1, V, generator=g).argsort(-1)[..., :k]
    q = torch.softmax(torch.randn(BS, BLOCK - 1, k, generator=g), -1)
    pick = torch.multinomial(q.view(-1, k), 1, generator=g).view(BS, BLOCK - 1, 1)
    drafts = ids.gather(-1, pick).squeeze(-1)
    return drafts, CandidateProposal(q.gather(-1, pick).squeeze(-1), ids, q)


def verify(logits, info, drafts, proposal, block_verification, counts=None):
    generator = torch.Generator().manual_seed(7)
    return sampled_accept(
        drafts, logits, info, BLOCK, generator=generator, proposal=proposal,
        block_verification=block_verification, draft_counts=counts,
    )  # fmt: skip


PATHS = [("point", False), ("sampled", False), ("sampled", True), ("candidates", False), ("candidates", True)]


@pytest.mark.parametrize("params", FILTERS)
@pytest.mark.parametrize(("drafts_are", "block_verification"), PATHS)
@pytest.mark.parametrize("ragged", [False, True])
def test_chunks_of_one_row_give_the_same_tokens(params, drafts_are, block_verification, ragged):
    logits, info, drafts, proposal = step_inputs(params)
    if drafts_are == "point":
        drafts, proposal = logits.view(BS, BLOCK, V)[:, :-1].argmax(-1), None
    elif drafts_are == "candidates":
        drafts, proposal = candidate_proposal()
        logits = logits.view(BS, BLOCK, V).clone()
        logits[:, :-1].scatter_add_(-1, proposal.ids, torch.full(proposal.ids.shape, 6.0))
        logits = logits.view(BS * BLOCK, V)
    counts = torch.arange(BS) % BLOCK if ragged else None
    whole = verify(logits, info, drafts, proposal, block_verification, counts)
    with budget(1):
        assert rows_within(V) == 1 and rows_within(V, BS * V * 4) == 1  # BS chunks a pass
        chunked = verify(logits, info, drafts, proposal, block_verification, counts)
    assert torch.equal(whole.lengths, chunked.lengths) and torch.equal(whole.tokens, chunked.tokens)
    assert (whole.lengths > 1).any()


@pytest.mark.parametrize("params", FILTERS)
def test_chunks_of_one_row_give_the_same_residual_masses(params):
    logits, info, drafts, proposal = step_inputs(params, seed=3)
    law = target_law.row_laws(logits, info, BLOCK, target_law.plan_for(info, V))
    proposal = proposal.every_row()
    p_draft = sampled_verify.draft_probs(law, logits, drafts)
    weights = sampled_verify.prefix_weights(p_draft, proposal.q_draft)
    whole = sampled_verify.residual_masses(law, logits, proposal, weights)
    with budget(1):
        chunked = sampled_verify.residual_masses(law, logits, proposal, weights)
    assert torch.allclose(whole, chunked, rtol=0, atol=1e-6)
    assert (whole[:, 1:] > 0).float().mean() > 0.5  # masses that matter


@pytest.mark.parametrize("params", FILTERS)
def test_chunks_of_one_row_give_the_same_tree_draws(params):
    nodes = 8
    logits = torch.randn(BS * nodes, V, generator=torch.Generator().manual_seed(5)) * 3
    info = sampling_info(params, BS)
    torch.manual_seed(11)
    whole = target_law.draw_every_row(logits, info, nodes, None)
    with budget(1):
        torch.manual_seed(11)
        chunked = target_law.draw_every_row(logits, info, nodes, None)
    assert whole.shape == (BS, nodes) and torch.equal(whole, chunked)


def test_the_chunked_passes_read_no_device_data_on_the_host():
    logits, info, drafts, proposal = step_inputs(FILTERS[0])
    params = [info.temperatures, info.top_ks, info.top_ps, info.min_ps]
    counts = torch.arange(BS) % BLOCK
    with budget(1), DeviceDataGuard([logits, drafts, counts, proposal.q_draft, proposal.features, *params]):
        for block_verification in (False, True):
            verify(logits, info, drafts, proposal, block_verification, counts)
        verify(logits, info, drafts, None, False, counts)
        target_law.draw_every_row(logits, info, BLOCK, None)
