"""Our drafter variants (engine-free, eager) against SGLang's own definitions in
`sglang.srt.models.dflash`, with the same weights loaded under the checkpoint's names:
- the grouped convolution (drafter/conv.py) against `DFlashGroupedConv`: both sides of the
  kernel, flat batches of whole blocks (the server's layout) and [b, B, D] blocks (the reference's);
- DFlash2's selector (drafter/selector.py) against `CandidateSelector`: the K x K lattice and the
  greedy walk over it;
- Laguna's attention gate and per-feature norms (drafter/laguna.py) against
  `DFlashLagunaAttention.apply_attention_output` and `DFlashLagunaForCausalLM.project_target_hidden`
  (called on stand-in objects holding the same modules: SGLang's classes need a TP runtime to
  build; the servers compare the whole drafter with the built-in's, tests/server/test_drafter_variants.py);
- Domino's rollout (drafter/domino.py) against `domino_greedy_rollout`, with and without the
  shifted labels and the candidate pool (SGLang refuses Domino off CUDA at startup; its rollout
  itself is plain torch and runs here).
SGLang's versions are torch.compiled; they run eager here (force_eager), the math unchanged, so
no C++ compiler is needed."""

import functools
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.models.dflash import CandidateSelector as SGLangSelector
from sglang.srt.models.dflash import DFlashGroupedConv, DFlashLagunaAttention, DFlashLagunaForCausalLM
from sglang.srt.speculative.domino_utils import domino_greedy_rollout
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from dflash_sglang.drafter.conv import GroupedBlockConv
from dflash_sglang.drafter.domino import domino_block_drafts
from dflash_sglang.drafter.laguna import gated, normed_features
from dflash_sglang.drafter.selector import CandidateSelector
from dflash_sglang.sampling.distribution import vocab_parallel_logits


def randomize(module: torch.nn.Module, generator: torch.Generator) -> None:
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator))


@pytest.mark.parametrize("block,taps,group", [(8, 3, 16), (4, 4, 8), (5, 2, 64)])
def test_our_convolution_is_sglangs(block, taps, group):
    generator = torch.Generator().manual_seed(block * taps)
    ours, theirs = GroupedBlockConv(64, taps, group, block), DFlashGroupedConv(64, block, taps, group)
    randomize(ours, generator)
    theirs.load_state_dict(ours.state_dict())  # the checkpoint's names and shapes are SGLang's
    flat = torch.randn(3 * block, 64, generator=generator)
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        (x_ours, k_ours), (x_theirs, k_theirs) = ours.prepare(flat), theirs.prepare(flat)
        assert torch.allclose(x_ours, x_theirs, atol=1e-5) and torch.equal(k_ours, k_theirs)
        assert torch.allclose(ours.finish(flat, k_ours), theirs.finish(flat, k_theirs), atol=1e-5)
        blocks, deltas = ours.prepare(flat.view(3, block, 64))  # the reference's layout
        assert torch.allclose(blocks.view(-1, 64), x_theirs, atol=1e-5)
        assert torch.allclose(ours.finish(flat.view(3, block, 64), deltas).view(-1, 64),
                              theirs.finish(flat, k_theirs), atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("batch,slots,top_k", [(3, 7, 4), (1, 15, 8), (5, 1, 2)])
def test_our_selector_is_sglangs(batch, slots, top_k):
    generator = torch.Generator().manual_seed(batch * slots)
    ours = CandidateSelector(64, 384, 8, top_k)
    theirs = SGLangSelector(hidden_size=64, vocab_size=384, state_rank=8, top_k=top_k)
    randomize(ours, generator)
    theirs.load_state_dict(ours.state_dict())
    ids = torch.randint(0, 384, (batch, slots, top_k), generator=generator)
    unary = torch.randn(batch, slots, top_k, generator=generator)
    hidden = torch.randn(batch, slots, 64, generator=generator)
    anchor = torch.randint(0, 384, (batch,), generator=generator)
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        scores = theirs.build_lattice(
            candidate_ids=ids, unary_logits=unary, hidden_states=hidden, anchor_token_ids=anchor
        )
        assert torch.allclose(ours.lattice(ids, unary, hidden, anchor), scores, atol=1e-5)
        greedy = torch.ones(batch, dtype=torch.bool)
        tokens, _ = theirs.sample_path(candidate_ids=ids, scores=scores, uniforms=torch.rand(batch, slots),
                                       temperatures=torch.ones(batch), greedy_mask=greedy)  # fmt: skip
    assert torch.equal(ours.greedy_walk(ids, scores), tokens)


@pytest.mark.parametrize("multiplier,softcap", [(1.0, None), (0.5, None), (1.0, 30.0), (2.0, 3.0)])
def test_our_unary_scores_are_sglangs(multiplier, softcap):
    """The selector's scores of the top-k logits: SGLang's `_transform_unary_logits` (the output
    multiplier, then the softcap) on the same values."""
    from sglang.srt.models.dflash import DFlash2DraftModel

    from dflash_sglang.drafter.selector import unary_scores

    values = torch.randn(3, 7, 4, generator=torch.Generator().manual_seed(1)) * 20
    config = SimpleNamespace(output_multiplier=multiplier, final_logit_softcapping=softcap)
    theirs = DFlash2DraftModel._transform_unary_logits(SimpleNamespace(draft_config=config), values.clone())
    assert torch.equal(unary_scores(values, multiplier, softcap), theirs)
    if softcap is not None:  # the cap does something on these values
        assert theirs.abs().max() <= softcap < values.abs().max() * multiplier


@pytest.mark.parametrize("pool", [0, 50, 2048], ids=["whole-vocabulary", "pool-50", "pool-default"])
@pytest.mark.parametrize("shift_label", [True, False])
def test_our_domino_rollout_is_sglangs(pool, shift_label):
    generator = torch.Generator().manual_seed(pool + shift_label)
    gru = torch.nn.GRU(64, 16, num_layers=1, bias=False, batch_first=True)
    proj = torch.nn.Sequential(
        torch.nn.Linear(80, 32, bias=False), torch.nn.SiLU(), torch.nn.Linear(32, 384, bias=False)
    )
    embedding = torch.nn.Embedding(384, 64)
    for module in (gru, proj, embedding):
        randomize(module, generator)
    hidden = torch.randn(3, 8, 64, generator=generator)
    verified = torch.randint(0, 384, (3,), generator=generator)
    head = torch.randn(384, 64, generator=generator)
    theirs = domino_greedy_rollout(
        draft_hidden=hidden, bonus_tokens=verified, target_embedding=embedding, lm_head_weight=head,
        prefix_gru=gru, embed_proj=proj, vocab_size=384, shift_label=shift_label, candidate_pool_size=pool,
        in_cuda_graph=False,
    )  # fmt: skip
    # Ours as the worker calls it: the proposal features and their logits through the product's
    # code (vocab_parallel_logits over an LM head holding the same weight, one rank).
    logits_of = functools.partial(vocab_parallel_logits, lm_head=SimpleNamespace(weight=head))
    with torch.no_grad():
        ours = domino_block_drafts(hidden, shift_label, logits_of, gru, proj, verified, embedding, pool)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("per_head", [True, False], ids=["per-head", "per-element"])
def test_our_laguna_gate_and_feature_norms_are_sglangs(per_head):
    generator = torch.Generator().manual_seed(int(per_head))
    heads, head_dim, hidden, features = 4, 16, 64, 3
    gate = torch.nn.Linear(hidden, heads if per_head else heads * head_dim, bias=False)
    norms = torch.nn.ModuleList(Qwen3RMSNorm(hidden) for _ in range(features))
    fc, hidden_norm = torch.nn.Linear(features * hidden, hidden, bias=False), Qwen3RMSNorm(hidden)
    for module in (gate, norms, fc, hidden_norm):
        randomize(module, generator)
    attention = SimpleNamespace(g_proj=lambda x: (gate(x), None), gate_per_head=per_head, num_heads=heads,
                                head_dim=head_dim)  # fmt: skip
    out, block = (
        torch.randn(5, heads * head_dim, generator=generator),
        torch.randn(5, hidden, generator=generator),
    )
    with torch.no_grad():
        theirs = DFlashLagunaAttention.apply_attention_output(attention, out, block)
        assert torch.allclose(gated(gate(block), out, per_head, heads), theirs)
        config = SimpleNamespace(hidden_size=hidden)
        model = SimpleNamespace(fc=fc, hidden_norm=hidden_norm, aux_hidden_norms=norms, config=config,
                                is_nemotron_35_draft=False, num_context_features=features)  # fmt: skip
        target_hidden = torch.randn(7, features * hidden, generator=generator)
        theirs = DFlashLagunaForCausalLM.project_target_hidden(model, target_hidden)
        assert torch.allclose(hidden_norm(fc(normed_features(norms, target_hidden))), theirs, atol=1e-6)


def selector_case(batch: int, slots: int, top_k: int, vocab: int, seed: int):
    """A random selector, SGLang's with the same weights, and one block's inputs (distinct
    candidates a position)."""
    generator = torch.Generator().manual_seed(seed)
    ours = CandidateSelector(16, vocab, 4, top_k)
    theirs = SGLangSelector(hidden_size=16, vocab_size=vocab, state_rank=4, top_k=top_k)
    randomize(ours, generator)
    theirs.load_state_dict(ours.state_dict())
    ids = torch.stack([torch.randperm(vocab, generator=generator)[:top_k] for _ in range(slots)])
    ids = ids.expand(batch, slots, top_k).clone()
    values = torch.randn(slots, top_k, generator=generator).expand(batch, slots, top_k).clone()
    hidden = torch.randn(slots, 16, generator=generator).expand(batch, slots, 16).clone()
    anchor = torch.full((batch,), 3)
    return ours, theirs, ids, values, hidden, anchor


def test_our_sampled_walk_is_sglangs():
    """DFlash2 at temperature > 0 (sampled drafts, the default): the drafts and q of our walk
    equal SGLang's module's (its lattice, then its `sample_path`) with the same weights and
    uniforms, greedy rows included."""
    from dflash_sglang.drafter.sampled_walk import sampled_walk
    from tests.planted.simulate import sampling_info

    batch, slots, top_k, vocab = 6, 5, 4, 64
    ours, theirs, ids, values, hidden, anchor = selector_case(batch, slots, top_k, vocab, seed=3)
    info = sampling_info({"temperature": 0.7}, batch)
    info.top_ks[:2] = 1  # greedy rows
    uniforms = torch.rand(batch, slots, generator=torch.Generator().manual_seed(4))
    config = SimpleNamespace(output_multiplier=1.0, final_logit_softcapping=None)
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        drafts, proposal = sampled_walk(ours, config, values, ids, hidden, anchor, info, uniforms)
        scores = theirs.build_lattice(
            candidate_ids=ids, unary_logits=values, hidden_states=hidden, anchor_token_ids=anchor
        )
        tokens, q_rows = theirs.sample_path(candidate_ids=ids, scores=scores, uniforms=uniforms,
                                            temperatures=torch.full((batch,), 0.7),
                                            greedy_mask=info.top_ks <= 1)  # fmt: skip
    assert torch.equal(drafts, tokens) and torch.allclose(proposal.q, q_rows)
    chosen = (ids == tokens.unsqueeze(-1)).float().argmax(-1, keepdim=True)
    assert torch.allclose(proposal.q_draft, q_rows.gather(-1, chosen).squeeze(-1))
    assert torch.equal(drafts[:2], ours.greedy_walk(ids[:2], scores[:2]))  # greedy rows: the argmax walk


def dflash2_law_p_values() -> list[float]:
    """Drafts from the sampled walk, verified with their K-candidate q, 40,000 requests: the
    chi-square p-values of the first emitted token against p at the first position, and of the
    token after an accepted draft against p at the next."""
    from scipy.stats import chisquare

    from dflash_sglang.drafter.sampled_walk import sampled_walk
    from dflash_sglang.sampling.sampled_verify import sampled_accept
    from tests.planted.simulate import sampling_info

    n, slots, top_k, vocab = 40_000, 2, 4, 8
    ours, _, ids, values, hidden, anchor = selector_case(n, slots, top_k, vocab, seed=5)
    info = sampling_info({"temperature": 1.0}, n)
    config = SimpleNamespace(output_multiplier=1.0, final_logit_softcapping=None)
    torch.manual_seed(6)
    target_logits = torch.randn(slots + 1, vocab) - 1.0  # the drafts are likely, not certain
    for j in range(slots):
        target_logits[j, ids[0, j]] = values[0, j] + 0.5 * torch.randn(top_k)
    target = torch.softmax(target_logits, -1)
    with torch.no_grad():
        drafts, proposal = sampled_walk(ours, config, values, ids, hidden, anchor, info)
        accepted = sampled_accept(drafts, target_logits.repeat(n, 1), info, slots + 1, proposal=proposal)
    after = accepted.lengths >= 2
    assert after.float().mean() > 0.1  # the check reaches the second position
    p_values = []
    for tokens, p in ((accepted.tokens[:, 0], target[0]), (accepted.tokens[after, 1], target[1])):
        counts = torch.bincount(tokens, minlength=vocab).double()
        expected = p.double() / p.double().sum() * counts.sum()
        p_values.append(chisquare(counts.numpy(), expected.numpy()).pvalue)
    return p_values


def test_the_verify_of_dflash2_sampled_walks_keeps_the_target_law():
    assert min(dflash2_law_p_values()) > 1e-4


@pytest.mark.parametrize("bug", ["residual_ignores_q", "q_at_the_wrong_position"])
def test_the_dflash2_law_check_catches_planted_bugs(monkeypatch, bug):
    """Planted by the test alone: after a rejection the token drawn from p (not the residual),
    or the residual taken against the next position's q."""
    from dflash_sglang.sampling import sampled_drafts, sampled_verify

    if bug == "residual_ignores_q":
        monkeypatch.setattr(sampled_verify, "final_law", lambda weight, p_at, q_at, bonus: p_at)
    else:
        rows = sampled_drafts.CandidateProposal.rows

        def shifted(self, at, vocab):
            return rows(self, (at + 1) % self.q_draft.shape[1], vocab)

        monkeypatch.setattr(sampled_drafts.CandidateProposal, "rows", shifted)
    assert min(dflash2_law_p_values()) < 1e-4
