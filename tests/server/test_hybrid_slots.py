"""A hybrid target with Qwen3.6-like linear-attention heads (16 value heads of 128 x 128, 8 key
heads) at block 16, served as an operator would meet it: its mamba pool, not KV, bounds the
running requests.

- With SGLang's ReplaySSM ring (the default for a chain, `DFLASH_SGLANG_REPLAY_SSM=1` here by
  name) the verify keeps no state per block position: the startup log puts a request slot with
  its verify scratch at most 1.5x the slot without speculation, against several times that with a
  state per position (`=0`, a second server started only for its log, whose warning names the
  ring's flag), and warns that mamba slots bound the running requests. Each line prices the other
  path, at what the other server holds.
- A tree of 16 nodes through the ring: a record per node (1.9x no-spec's slot with its dense conv
  windows), greedy equal to the target alone.
- Under the verify policy as users launch it (the adaptive width, per-request lengths through the
  ring on CPU), twenty requests at once against sixteen slots (the slot limit, four queued):
  every output equals transformers' greedy decoding of the target alone, float32, and so does an
  abort mid-block followed by the same requests again.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.step.replay_choice import REPLAY_ENV
from dflash_sglang.width.controller import ADAPTIVE_ENV
from dflash_sglang_tools.testing.server import SGLangServer
from dflash_sglang_tools.testing.tiny_hybrid import HybridShape, write_tiny_hybrid_pair

from .hybrid import HYBRID_ENV, generate, greedy, prompts
from .test_overlap import abort, stream_generate

BLOCK = 16
SLOTS = 16
NEW = 40
SHAPE = HybridShape(hot_tokens=3, linear_key_heads=8, linear_value_heads=16, linear_head_dim=128)
# Radix cache off: one mamba slot a request, so SLOTS slots allow SLOTS running requests.
ARGS = ["--max-mamba-cache-size", SLOTS, "--disable-radix-cache", "--max-running-requests", 48,
        "--max-total-tokens", 8192]  # fmt: skip
RATIO = re.compile(r"without speculation \((\d+\.\d+)x\)")
OTHER = re.compile(r"with (.+?) a slot would hold [\d.]+ (?:KiB|MiB) \((\d+\.\d+)x no-spec's\)")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_tiny_hybrid_pair(tmp_path_factory.mktemp("hybrid-slots"), 0, BLOCK, SHAPE)


def dflash(pair) -> list:
    return ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", pair.draft,
            "--speculative-num-draft-tokens", BLOCK]  # fmt: skip


@pytest.fixture(scope="module")
def server(pair):
    # The verify policy as users launch it (conftest pins whole blocks for the oracles that count
    # steps; nothing here counts them): the adaptive width, per-request lengths through the ring.
    env = {**HYBRID_ENV, REPLAY_ENV: "1", ADAPTIVE_ENV: ""}
    with SGLangServer(pair.target, [*ARGS, *dflash(pair)], env=env) as running:
        yield running


def slot_ratio(log: str) -> float:
    return float(RATIO.search(log).group(1))


def test_a_slot_holds_at_most_one_and_a_half_times_no_specs_and_the_limit_is_named(server, pair):
    log = server.log_path.read_text()
    ring = slot_ratio(log)
    assert "verify scratch: SGLang's ReplaySSM ring, folded every commit" in log
    assert "verify width adaptive (the default here" in log and "per request" in log  # as launched
    assert ring <= 1.5, ring
    assert f"{SLOTS} mamba slots allow {SLOTS} running requests" in log
    assert "mamba slots, not KV, bound the running requests" in log
    with SGLangServer(pair.target, [*ARGS, *dflash(pair)], env={**HYBRID_ENV, REPLAY_ENV: "0"}) as states:
        before = states.log_path.read_text()
    assert "verify scratch: a state per block position" in before
    snapshots = slot_ratio(before)
    assert snapshots > 4 * ring, (snapshots, ring)  # B full states a row, against a ring of records
    assert "to lift it: --enable-linear-replayssm-spec" in before
    # Each startup line prices the path not taken, and each price is what the other server holds.
    (named, priced), (named_before, priced_before) = OTHER.search(log).groups(), OTHER.search(before).groups()
    assert (named, named_before) == ("a state per block position", "SGLang's ReplaySSM ring")
    assert float(priced) == pytest.approx(snapshots, rel=0.02) and float(priced_before) == pytest.approx(
        ring, rel=0.02
    )


def test_twenty_requests_on_sixteen_slots_equal_the_target_alone(server, pair):
    ids = (prompts() * 4)[:20]
    want = {tuple(p): greedy(pair.target, p, NEW) for p in prompts()}
    with ThreadPoolExecutor(len(ids)) as pool:
        outs = list(pool.map(lambda p: generate(server, p, NEW), ids))
    assert [out["output_ids"] for out in outs] == [want[tuple(p)] for p in ids]


def test_an_abort_mid_block_leaves_the_next_requests_exact(server, pair):
    """Requests aborted while they decode (their slots and ring rows freed mid-stream), then the
    same prompts again: a row's ring starts empty when it is handed out, so nothing leaks."""
    long_prompts = prompts()[3:]
    started = [threading.Event() for _ in long_prompts]
    params = {"temperature": 0, "max_new_tokens": 400}
    bodies = [{"rid": f"doomed-{i}", "input_ids": p, "sampling_params": params}
              for i, p in enumerate(long_prompts)]  # fmt: skip
    with ThreadPoolExecutor(len(bodies)) as pool:
        streams = [pool.submit(stream_generate, server, b, e) for b, e in zip(bodies, started, strict=True)]
        for body, event in zip(bodies, started, strict=True):
            assert event.wait(120)
            abort(server, body["rid"])
        finished = [future.result() for future in streams]
    assert all(len(out["output_ids"]) < 400 for out in finished)  # each stopped mid-stream
    again = [generate(server, p, NEW)["output_ids"] for p in long_prompts]
    assert again == [greedy(pair.target, p, NEW) for p in long_prompts]


def test_a_tree_through_the_ring_keeps_a_record_per_node_not_a_state(pair):
    """A 16-node tree (--speculative-eagle-topk 4) through the ring (tree/replay_ring.py): records
    per node, never a state per node, and greedy outputs equal to the target alone's. Its slot is
    1.9x no-spec's (a state per node would be about 16.5x, as a state per position at block 16), not
    the chain ring's 1.45x: SGLang keeps a tree's conv windows dense, (K - 1) inputs a node, where a
    chain's share their inputs (tree/switches.py, `dense_conv_windows_for_trees`); docs/hybrid.md."""
    tree = ["--speculative-eagle-topk", 4]
    env = {**HYBRID_ENV, REPLAY_ENV: "1"}
    with SGLangServer(pair.target, [*ARGS, *dflash(pair), *tree], env=env) as trees:
        log = trees.log_path.read_text()
        outs = [generate(trees, p, NEW)["output_ids"] for p in prompts()[:3]]
    assert "verify scratch: SGLang's ReplaySSM ring, a record per tree node (our tree replay)" in log
    assert slot_ratio(log) <= 2.0, slot_ratio(log)
    assert outs == [greedy(pair.target, p, NEW) for p in prompts()[:3]]
