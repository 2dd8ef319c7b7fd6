"""The drafter's LM head is read at most once per T > 0 verify step, on every sampled path.

Engine-free, CPU. The drafter's q needs its LM head ([n, H] by the [V, H] weight: each call reads
the whole weight). Token by token the verify needs q at the one rejected position per request
(one [bs, H] product); block verification needs q at every draft position (its residual masses)
and at the rejected one, all from one [bs * (B-1), H] product (`DraftProposal.every_row`), not
one a position (15 calls at block 16 before). Point drafts need none. The kept logits change no
law: the same acceptance and tokens as recomputing each row, under the same generator.
"""

import pytest
import torch

from dflash_sglang.sampling import sampled_drafts
from dflash_sglang.sampling.sampled_drafts import draw_drafts
from dflash_sglang.sampling.sampled_verify import sampled_accept
from tests.planted.simulate import sampling_info

BLOCK, V, H = 16, 512, 64


class CountedHead:
    """[n, H] -> [n, V] float32 logits, counting its calls (each one reads the whole weight)."""

    def __init__(self, weight: torch.Tensor):
        self.weight, self.calls = weight, 0

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return (hidden @ self.weight.T).float()


def step_inputs(bs: int, params: dict, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = CountedHead(torch.randn(V, H, generator=g) / H**0.5)
    features = torch.randn(bs, BLOCK - 1, H, generator=g) * 4
    logits = torch.randn(bs * BLOCK, V, generator=g) * 3  # the verify logits, [bs * B, V]
    info = sampling_info(params, bs)
    drafts, proposal = draw_drafts(features, head, info, V, generator=g)
    return head, logits, info, drafts, proposal


FILTERS = [{"temperature": 0.6, "top_k": 20, "top_p": 0.95}, {"temperature": 1.0}]
PATHS = [("point", False), ("point", True), ("sampled", False), ("sampled", True)]


@pytest.mark.parametrize("bs", [1, 8])
@pytest.mark.parametrize("params", FILTERS)
@pytest.mark.parametrize(("drafts_are", "block_verification"), PATHS)
def test_one_verify_step_reads_the_lm_head_at_most_once(bs, params, drafts_are, block_verification):
    head, logits, info, drafts, proposal = step_inputs(bs, params)
    if drafts_are == "point":
        drafts, proposal = logits.view(bs, BLOCK, V)[:, :-1].argmax(-1), None
    head.calls = 0
    generator = torch.Generator().manual_seed(3)
    sampled_accept(
        drafts,
        logits,
        info,
        BLOCK,
        generator=generator,
        proposal=proposal,
        block_verification=block_verification,
    )
    assert head.calls <= 1
    if proposal is not None:
        assert head.calls == 1  # q is needed: one read of the weight, not one a position


def test_a_narrowed_proposal_and_per_request_lengths_read_it_once_too():
    """The adaptive width's narrowed q (runtime/block.narrow) and ragged verify lengths
    (step/ragged.py)."""
    bs, width = 8, 9
    head, logits, info, drafts, proposal = step_inputs(bs, FILTERS[0])
    logits = logits.view(bs, BLOCK, V)[:, :width].flatten(0, 1)
    counts = torch.tensor([0, 1, 2, 3, 4, 5, 6, 8])
    for block_verification in (False, True):
        head.calls = 0
        sampled_accept(
            drafts[:, : width - 1], logits, info, width, proposal=proposal.narrow(width - 1),
            block_verification=block_verification, draft_counts=counts,
        )  # fmt: skip
        assert head.calls == 1


def test_every_row_slices_the_same_q_as_one_product_a_position():
    bs = 8
    head, _, _, _, proposal = step_inputs(bs, FILTERS[0])
    kept = proposal.every_row()
    assert kept.logits.shape == (bs * (BLOCK - 1), V) and kept.every_row() is kept
    head.calls = 0
    for i in range(BLOCK - 1):
        position = torch.full((bs,), i)
        q = proposal.rows(position, V)
        assert torch.allclose(kept.rows(position, V), q, atol=1e-6)
        assert torch.allclose(kept.narrow(i + 1).rows(position, V), q, atol=1e-6)
    assert head.calls == BLOCK - 1  # the un-kept proposal's rows; the kept one's called nothing


@pytest.mark.parametrize("params", FILTERS)
def test_block_verification_draws_the_same_tokens_as_one_product_a_position(monkeypatch, params):
    """Same uniforms, same generator: the kept logits give the acceptance and tokens that
    recomputing q's row at each position gave (the code before `every_row`)."""
    bs = 64
    _, logits, info, drafts, proposal = step_inputs(bs, params, seed=5)

    def step():
        generator = torch.Generator().manual_seed(11)
        return sampled_accept(
            drafts, logits, info, BLOCK, generator=generator, proposal=proposal, block_verification=True
        )

    once = step()
    monkeypatch.setattr(sampled_drafts.DraftProposal, "every_row", lambda self: self)
    per_position = step()
    assert torch.equal(once.lengths, per_position.lengths)
    assert torch.equal(once.tokens, per_position.tokens)
    assert (once.lengths > 1).any() and (once.lengths < BLOCK).any()  # both outcomes occur


def test_the_startup_rehearsal_runs_block_verification_with_q_kept(monkeypatch):
    """Under block verification the KV sizing's headroom covers the kept [bs * (B-1), V] logits
    (sampling/prewarm.py): the rehearsal runs that verify (on CPU it measures nothing)."""
    from dflash_sglang.sampling import prewarm

    kept = []
    every_row = sampled_drafts.DraftProposal.every_row
    monkeypatch.setattr(
        sampled_drafts.DraftProposal, "every_row", lambda self: kept.append(1) or every_row(self)
    )
    assert prewarm.rehearse(2, BLOCK, 256, "cpu", draws=True) == 0 and not kept
    assert prewarm.rehearse(2, BLOCK, 256, "cpu", draws=True, block=True) == 0 and kept
