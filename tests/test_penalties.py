"""Block penalties equal a no-spec server's, position by position.

The reference below applies SGLang's penalizer rules one generated token at a time, as a no-spec
server does: before token t, every token generated so far is counted (frequency per occurrence,
presence once, repetition once, and min_new_tokens bans the stop tokens while t < min). Position k
of a block `[b, d_1 .. d_{B-1}]` must see the committed tokens plus d_1 .. d_k.
"""

from __future__ import annotations

import torch

from dflash_sglang.sampling.penalties import (
    PenaltyLedger,
    PenaltyParams,
    apply_block_penalties,
    apply_tree_penalties,
    block_pairs,
)
from dflash_sglang.tree.batch import build_batch_trees

VOCAB = 12


def reference_penalties(logits, history, frequency, presence, repetition, min_new, stop_ids):
    """One row: logits [V] for the token after `history` (the generated tokens so far)."""
    out = logits.clone()
    counts = torch.bincount(torch.tensor(history, dtype=torch.long), minlength=VOCAB).float()
    out -= frequency * counts + presence * (counts > 0)
    if len(history) < min_new:
        out[stop_ids] = float("-inf")
    factors = torch.where(counts > 0, torch.as_tensor(repetition), torch.tensor(1.0))
    return torch.where(out < 0, out * factors, out / factors)


def random_case(seed: int, bs: int = 3, size: int = 5):
    gen = torch.Generator().manual_seed(seed)
    # A small alphabet, so drafts repeat each other and the committed tokens.
    histories = [torch.randint(0, 6, (int(torch.randint(1, 7, (1,), generator=gen)),), generator=gen).tolist()
                 for _ in range(bs)]  # fmt: skip
    block = torch.randint(0, 6, (bs, size), generator=gen)
    block[:, 0] = torch.tensor([h[-1] for h in histories])  # b: the last committed token
    logits = torch.randn(bs, size, VOCAB, generator=gen) * 3
    frequency = torch.rand(bs, generator=gen) * 2
    presence = torch.rand(bs, generator=gen) * 2 - 0.5
    repetition = torch.rand(bs, generator=gen) + 1.0
    min_new = torch.randint(0, 10, (bs,), generator=gen)
    return histories, block, logits, frequency, presence, repetition, min_new


def test_block_penalties_equal_token_by_token_penalties():
    stop_ids = [10, 11]
    for seed in range(30):
        histories, block, logits, frequency, presence, repetition, min_new = random_case(seed)
        bs, size, _ = logits.shape
        counts = torch.stack([torch.bincount(torch.tensor(h), minlength=VOCAB).float() for h in histories])
        lengths = torch.tensor([len(h) for h in histories])
        params = PenaltyParams(
            frequency=frequency,
            presence=presence,
            repetition=repetition,
            min_new_tokens=min_new,
            stop_ids=torch.tensor([stop_ids] * bs),
        )
        got = logits.clone()
        apply_block_penalties(got, block, counts, lengths, params)
        for i in range(bs):
            for k in range(size):
                history = histories[i] + block[i, 1 : k + 1].tolist()
                want = reference_penalties(
                    logits[i, k], history, frequency[i], presence[i], repetition[i], int(min_new[i]), stop_ids
                )
                torch.testing.assert_close(got[i, k], want, rtol=1e-6, atol=1e-6)


def test_tree_penalties_equal_token_by_token_penalties_along_each_root_path():
    """A tree node's history is the committed tokens plus the drafts on its root path; it emits
    generated token number lengths + its depth."""
    stop_ids = [10, 11]
    for seed in range(20):
        histories, _, _, frequency, presence, repetition, min_new = random_case(seed)
        bs = len(histories)
        gen = torch.Generator().manual_seed(100 + seed)
        draft_logprobs = torch.log_softmax(torch.randn(bs, 4, VOCAB, generator=gen) * 2, -1)
        roots = torch.tensor([h[-1] for h in histories])
        tree = build_batch_trees(roots, draft_logprobs, budget=9, max_children=3)
        logits = torch.randn(bs, tree.num_nodes, VOCAB, generator=gen) * 3
        counts = torch.stack([torch.bincount(torch.tensor(h), minlength=VOCAB).float() for h in histories])
        lengths = torch.tensor([len(h) for h in histories])
        params = PenaltyParams(frequency, presence, repetition, min_new, torch.tensor([stop_ids] * bs))
        got = logits.clone()
        apply_tree_penalties(got, tree, counts, lengths, params)
        for i in range(bs):
            one = tree.unbatch(i)
            for k in range(tree.num_real):
                path = one.root_path(k)[1:]  # the drafts from depth 1 down to k
                history = histories[i] + one.tokens[path].tolist()
                want = reference_penalties(
                    logits[i, k], history, frequency[i], presence[i], repetition[i], int(min_new[i]), stop_ids
                )
                torch.testing.assert_close(got[i, k], want, rtol=1e-6, atol=1e-6)


def test_each_penalty_alone_and_unused_ones_left_out():
    histories, block, logits, frequency, presence, repetition, _ = random_case(7)
    counts = torch.stack([torch.bincount(torch.tensor(h), minlength=VOCAB).float() for h in histories])
    lengths = torch.tensor([len(h) for h in histories])
    for name in ("frequency", "presence", "repetition"):
        values = {"frequency": None, "presence": None, "repetition": None}
        values[name] = {"frequency": frequency, "presence": presence, "repetition": repetition}[name]
        got = logits.clone()
        apply_block_penalties(
            got, block, counts, lengths, PenaltyParams(**values, min_new_tokens=None, stop_ids=None)
        )
        for i in range(len(histories)):
            for k in range(block.shape[1]):
                want = reference_penalties(
                    logits[i, k],
                    histories[i] + block[i, 1 : k + 1].tolist(),
                    float(frequency[i]) if name == "frequency" else 0.0,
                    float(presence[i]) if name == "presence" else 0.0,
                    float(repetition[i]) if name == "repetition" else 1.0,
                    0,
                    [],
                )
                torch.testing.assert_close(got[i, k], want)


def test_min_new_tokens_ban_ends_at_the_position_reaching_the_minimum():
    logits = torch.zeros(1, 4, VOCAB)
    params = PenaltyParams(None, None, None, torch.tensor([5]), torch.tensor([[11, -1]]))
    apply_block_penalties(
        logits, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, VOCAB), torch.tensor([3]), params
    )
    # Positions emit generated tokens number 3, 4, 5, 6: the stop token is banned for the first two.
    assert logits[0, :, 11].tolist() == [float("-inf"), float("-inf"), 0.0, 0.0]
    assert (logits[0, :, :11] == 0).all()


def req(slot: int, rid: str, output_ids=()):
    """SGLang's own Req, in request slot `slot`."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    out = Req(rid, "", [1, 2], SamplingParams())
    out.kv.req_pool_idx, out.output_ids = slot, list(output_ids)
    return out


def test_ledger_restarts_at_prefill_and_counts_what_steps_emit():
    ledger = PenaltyLedger(slots=4, vocab_size=VOCAB, device="cpu")
    slots = torch.tensor([2, 0])
    ledger.start(slots, torch.tensor([5, 7]), [req(2, "a"), req(0, "b")])
    ledger.commit(slots, torch.tensor([[5, 5, 9, 1], [3, 0, 0, 0]]), torch.tensor([3, 1]))
    assert ledger.counts[2, 5] == 3 and ledger.counts[2, 9] == 1 and ledger.counts[2, 1] == 0
    assert ledger.counts[0, 7] == 1 and ledger.counts[0, 3] == 1 and ledger.counts[0, 0] == 0
    assert ledger.lengths.tolist() == [2, 0, 4, 0]
    ledger.start(torch.tensor([2]), torch.tensor([4]), [req(2, "c")])  # a new request in slot 2
    assert ledger.counts[2].sum() == 1 and ledger.counts[2, 4] == 1 and ledger.lengths[2] == 1


def test_a_request_prefilled_elsewhere_starts_from_its_output_ids():
    """A PD decode server's request reaches verify with the prefill server's first token in its
    output_ids and no prefill here; requests started here are left alone."""
    ledger = PenaltyLedger(slots=4, vocab_size=VOCAB, device="cpu")
    ledger.start(torch.tensor([1]), torch.tensor([5]), [req(1, "here")])
    ledger.commit(torch.tensor([1]), torch.tensor([[6, 6]]), torch.tensor([2]))
    before = ledger.counts[1].clone()
    ledger.catch_up([req(1, "here", [5]), req(3, "from-prefill-server", [9]), req(0, "resumed", [2, 2, 8])])
    assert torch.equal(ledger.counts[1], before) and ledger.lengths[1] == 3  # host output_ids may lag
    assert ledger.counts[3, 9] == 1 and ledger.counts[3].sum() == 1 and ledger.lengths[3] == 1
    assert ledger.counts[0, 2] == 2 and ledger.counts[0, 8] == 1 and ledger.lengths[0] == 3
    ledger.commit(torch.tensor([3]), torch.tensor([[9, 4]]), torch.tensor([2]))
    ledger.catch_up([req(3, "from-prefill-server", [9])])  # once only: the commits count from then on
    assert ledger.counts[3, 9] == 2 and ledger.counts[3, 4] == 1 and ledger.lengths[3] == 3


def test_block_pairs_cover_each_draft_before_each_later_position():
    j, k = block_pairs(4, "cpu")
    assert sorted(zip(j.tolist(), k.tolist(), strict=True)) == [
        (1, 1),
        (1, 2),
        (1, 3),
        (2, 2),
        (2, 3),
        (3, 3),
    ]
