"""The reference decoder against the target's own decoding.

Greedy: token for token equal to transformers' `generate` (block sizes 4/8/16, lengths ending
mid-block, stop tokens inside a block), with exact accept lengths under an oracle drafter.
Sampling: the distribution of the emitted tokens equals the target's own (chi-square test).
"""

import itertools

import pytest
import torch
from scipy import stats

import dflash_sglang.drafter.reference as reference
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.testing.tiny_dense import TinyShape, tiny_draft, tiny_target

from .conftest import prompt_of


def target_greedy(target, prompt, n):
    out = target.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, prompt.shape[1] :].tolist()


@pytest.mark.parametrize("block_size", [4, 8, 16])
@pytest.mark.parametrize("prompt_len,seed", [(1, 0), (6, 1), (23, 2), (48, 3)])
def test_greedy_equals_target_generate(target, draft, block_size, prompt_len, seed):
    prompt = prompt_of(prompt_len, seed)
    max_new = 37  # ends mid-block for every block size
    out = dflash_generate(target, draft, prompt, max_new, block_size=block_size)
    assert out.tokens == target_greedy(target, prompt, max_new)
    assert all(1 <= n <= block_size for n in out.accept_lengths)
    assert sum(out.accept_lengths) == len(out.tokens) - 1


def test_stop_token_inside_a_block_ends_the_output_there(target, draft, monkeypatch):
    prompt = prompt_of(10, 7)
    expected = target_greedy(target, prompt, 40)
    oracle(monkeypatch, target, prompt, wrong_at=None)  # full blocks, so the stop is mid-block
    stop_at = next(i for i in range(5, 40) if expected[i] not in expected[:i] and i % 8 not in (0, 1))
    out = dflash_generate(target, draft, prompt, 40, block_size=8, stop_token_ids=[expected[stop_at]])
    assert out.tokens == expected[: stop_at + 1]
    assert out.accept_lengths[-1] < 8  # the last step was cut by the stop token


def test_max_new_tokens_smaller_than_a_block(target, draft):
    prompt = prompt_of(12, 4)
    assert dflash_generate(target, draft, prompt, 0).tokens == []
    one = dflash_generate(target, draft, prompt, 1)
    assert one.tokens == target_greedy(target, prompt, 1) and one.accept_lengths == []
    five = dflash_generate(target, draft, prompt, 5, block_size=16)
    assert five.tokens == target_greedy(target, prompt, 5)


def oracle(monkeypatch, target, prompt, wrong_at):
    """Replace the drafter's proposal with the target's true future, wrong at block index
    `wrong_at` (1-based draft position) or never."""
    future = target_greedy(target, prompt, 80)
    vocab, prompt_len = target.config.vocab_size, prompt.shape[1]

    def propose(target_, draft_, block_ids, block_positions, *_):
        start = int(block_positions[0, 0])
        tokens = torch.tensor(future[start - prompt_len + 1 : start - prompt_len + block_ids.shape[1]])
        if wrong_at is not None:
            tokens[wrong_at - 1] = (tokens[wrong_at - 1] + 1) % vocab
        return torch.nn.functional.one_hot(tokens, vocab).float().unsqueeze(
            0
        ) * 10, None  # logits, no own drafts

    monkeypatch.setattr(reference, "propose", propose)
    return future


@pytest.mark.parametrize("wrong_at,expected_len", [(None, 8), (1, 1), (3, 3), (7, 7)])
def test_accept_lengths_under_an_oracle_drafter(target, draft, monkeypatch, wrong_at, expected_len):
    """Drafts right up to position k-1 commit exactly k tokens per step; a perfect drafter commits
    the whole block (accept length = block size)."""
    prompt = prompt_of(9, 5)
    future = oracle(monkeypatch, target, prompt, wrong_at)
    out = dflash_generate(target, draft, prompt, 1 + 4 * expected_len, block_size=8)
    assert out.tokens == future[: 1 + 4 * expected_len]
    assert out.accept_lengths == [expected_len] * 4


def five_token_pair():
    """A target over a 5-token vocabulary and a block-3 drafter: small enough that the joint law
    of three new tokens can be enumerated for the statistical tests."""
    shape = TinyShape(
        vocab_size=5, hidden_size=32, target_layers=4, draft_layers=1, num_features=1,
        heads=2, kv_heads=1, init_std=0.3,
    )  # fmt: skip
    target = tiny_target(shape, seed=11)
    return target, tiny_draft(target.config, shape, seed=12, block_size=3)


def test_sampling_matches_the_target_distribution():
    """Temperature 1: the joint law of the first three new tokens equals the target's own.

    A 5-token vocabulary keeps every outcome's probability computable exactly (125 outcomes, from
    one target forward over all of them). 1500 DFlash samples with block size 3 exercise
    acceptance, rejection and the bonus token; a chi-square test at p=0.001 must pass, and the
    same samples must fail against the distribution at another temperature (the test has power).
    """
    target, draft = five_token_pair()
    prompt = torch.tensor([[0, 3, 1, 2]])
    g = torch.Generator().manual_seed(0)
    samples, accepts = [], []
    for _ in range(1500):
        out = dflash_generate(target, draft, prompt, 3, temperature=1.0, generator=g)
        samples.append(tuple(out.tokens))
        accepts += out.accept_lengths
    assert {1, 2} <= set(accepts)  # rejections and acceptances both happened

    outcomes = list(itertools.product(range(5), repeat=3))
    with torch.no_grad():
        seqs = torch.cat([prompt.expand(125, -1), torch.tensor(outcomes)], dim=1)
        logits = target(seqs).logits[:, 3:6]

    def law(temperature):
        logp = torch.log_softmax(logits.double() / temperature, -1)
        return logp.gather(-1, seqs[:, 4:7].unsqueeze(-1)).squeeze(-1).sum(-1).exp()

    counts = torch.tensor([samples.count(o) for o in outcomes], dtype=torch.float64)

    def chi_square_p_value(probs):
        expected = probs * counts.sum()
        keep = expected >= 5  # pool the rare outcomes into one cell
        observed = torch.cat([counts[keep], counts[~keep].sum().view(1)])
        expected = torch.cat([expected[keep], expected[~keep].sum().view(1)])
        return stats.chisquare(observed.numpy(), expected.numpy()).pvalue

    assert chi_square_p_value(law(1.0)) > 1e-3
    assert chi_square_p_value(law(0.8)) < 1e-6, chi_square_p_value(law(0.8))
