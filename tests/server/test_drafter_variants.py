"""Drafter generations and config variants SGLang's built-in DFLASH loads, served by our worker
(real servers on 127.0.0.1, float32; tiny checkpoints in each on-disk format,
dflash_sglang_tools.testing.tiny_variants):
- under the plain worker, one Laguna drafter (gated attention, per-feature norms) with MiMo's
  attention sinks and value scale and grouped convolutions, side by side with SGLang's built-in
  worker on the same drafter;
- under the overlap worker (host-sync check on), a DFlash2 drafter (candidate selector) with the
  same sinks and convolutions;
- under the plain worker, a Domino drafter (GRU-corrected rollout, shift_label) with them too.
The built-in cannot run DFlash2 (its candidate top-k goes to flashinfer) nor Domino (CUDA only)
on CPU, so there the engine-free reference alone decides.
Each server against the session's no-spec server of the same target (the variants change only
the drafter): greedy one at a time, 8 concurrent and on a radix hit. The drafts are the
variant's, not the plain backbone's: per-request verify counts equal the engine-free
reference's (which implements every variant) and, for Laguna, sinks and convolutions, the
built-in's;
the reference with any one variant dropped counts differently. Sampled requests follow the
target's law (law_matrix.SETTINGS, each with its control).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from dflash_sglang.drafter.model import DFlashDraftModel
from dflash_sglang.drafter.reference import dflash_generate
from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_variants import write_variant_pair

from .conftest import OVERLAP_CHECKED, PLAIN, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import HOT_SHAPE, load, reference

BLOCK = 8
MAX_NEW = 32
PROMPT_LENGTHS = [1, 3, 7, 9, 16, 31, 50, 70]
SERVERS = {  # our server -> (its drafter's variants, its worker's environment, the law matrix's path)
    "plain": (("laguna", "sinks", "conv"), PLAIN, "Laguna drafter with sinks and convolutions, plain worker"),
    "overlap": (("dflash2", "sinks", "conv"), OVERLAP_CHECKED,
                "DFlash2 drafter with sinks and convolutions, overlap worker"),
    "domino": (("domino", "sinks", "conv"), PLAIN,
               "Domino drafter with sinks and convolutions, plain worker"),
}  # fmt: skip
DROPPED = {  # each variant's config fields at their plain values
    "sinks": {"attention_sink_bias": False, "attention_value_scale": None},
    "conv": {"conv_kernel_size": 0, "conv_group_size": 0},
    "dflash2": {"selector_rank": 0, "selector_top_k": 0},
    "domino": {"domino_gru_dim": 0, "domino_emb_dim": 0, "domino_shift_label": False},
    "laguna": {"laguna": False, "laguna_gating": None},
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory, pair8):
    root = tmp_path_factory.mktemp("variants")
    made = {
        name: write_variant_pair(root / name, variants, 0, 8, HOT_SHAPE)
        for name, (variants, _, _) in SERVERS.items()
    }
    for pair in made.values():  # the target is the session's
        assert pair.target.joinpath("model.safetensors").read_bytes() == \
            pair8.target.joinpath("model.safetensors").read_bytes()  # fmt: skip
    return made


@pytest.fixture(scope="module", params=sorted(SERVERS))
def ours(request, pairs):
    pair = pairs[request.param]
    with SGLangServer(pair.target, dflash_args(pair, BLOCK), env=SERVERS[request.param][1]) as server:
        server.kind, server.pair = request.param, pair
        yield server


@pytest.fixture(scope="module")
def builtin(pairs):
    pair = pairs["plain"]
    with SGLangServer(
        pair.target, dflash_args(pair, BLOCK), env={"DFLASH_SGLANG_WORKER": "builtin"}
    ) as server:
        yield server


@pytest.fixture(scope="module")
def prompts():
    return [[10 + (7 * i + 13 * n) % 290 for i in range(n)] for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def expected(nospec8, prompts):
    return [out["output_ids"] for out in nospec8.generate(prompts, MAX_NEW)]


def counts_without(variant: str, pair, prompts) -> list[int]:
    """The reference's verify counts with one variant's modules dropped."""
    _, target, draft = load(pair.target, pair.draft)
    plain = DFlashDraftModel(dataclasses.replace(draft.config, **DROPPED[variant])).eval()
    kept = plain.state_dict()
    plain.load_state_dict({k: v for k, v in draft.state_dict().items() if k in kept})
    counts = []
    for ids in prompts:
        out = dflash_generate(target, plain, torch.tensor([ids]), MAX_NEW, block_size=BLOCK)
        counts.append(len(out.accept_lengths))
    return counts


def test_greedy_equals_nospec_with_the_variants_drafts(request, ours, prompts, expected):
    pair = ours.pair
    ours_counts, reference_counts = [], []
    for ids, want in zip(prompts, expected, strict=True):
        out, ref = ours.generate(ids, MAX_NEW), reference(pair, ids, MAX_NEW, BLOCK)
        assert out["output_ids"] == ref.tokens == want
        ours_counts.append(out["meta_info"]["spec_verify_ct"])
        reference_counts.append(len(ref.accept_lengths))
    assert ours_counts == reference_counts
    if ours.kind == "plain":  # the built-in serves these variants on CPU: the same drafts
        builtin = request.getfixturevalue("builtin")
        outs = [builtin.generate(ids, MAX_NEW) for ids in prompts]
        assert [out["output_ids"] for out in outs] == expected
        assert [out["meta_info"]["spec_verify_ct"] for out in outs] == reference_counts
    for variant in SERVERS[ours.kind][0]:  # each variant's modules change the drafts
        assert reference_counts != counts_without(variant, pair, prompts), variant
    assert any(count < MAX_NEW - 1 for count in ours_counts)  # drafts were accepted


def test_concurrent_and_radix_hits_equal_nospec(ours, nospec8, prompts, expected):
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda ids: ours.generate(ids, MAX_NEW), prompts))
    assert [out["output_ids"] for out in outs] == expected
    longer = prompts[-1] + expected[-1][:12]
    out = ours.generate(longer, MAX_NEW)
    assert out["meta_info"]["cached_tokens"] >= len(prompts[-1])
    assert out["output_ids"] == nospec8.generate(longer, MAX_NEW)["output_ids"]


def test_the_sampled_law_with_real_filters(ours, prompts):
    _, target, _ = load(ours.pair.target, ours.pair.draft)
    assert_every_setting_follows_the_law(SERVERS[ours.kind][2], ours, target, prompts)
