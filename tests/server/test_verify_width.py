"""Lossless across verify widths (width/controller.py): `DFLASH_SGLANG_VERIFY_WIDTHS` forces every
decode step's width through a changing cycle, whole block, plain decoding (width 1) and partial
blocks in turn, so consecutive steps switch width, per step, across the batch; and
`DFLASH_SGLANG_FORCED_REQUEST_LENGTHS` forces per-request lengths through the same cycle, request i
of step s at cycle[(s + i) % 8], so every batch mixes lengths in one ragged verify (step/ragged.py);
a second such server runs the drafter only for the requests of length above 1
(`DFLASH_SGLANG_PARTIAL_DRAFTER=1`): greedy equal to the reference there too.

- dense target (block 8), the sync worker with the width cycle, the overlap worker with the
  per-request cycle: prompts one at a time, 8 concurrent and a radix hit equal the engine-free
  reference (the target's greedy output);
- the adaptive width, as a server launched without the switch gets it on CPU (the default where no
  verify has a graph; the session pins `DFLASH_SGLANG_ADAPTIVE_WIDTH=0` for every other server),
  overlap worker: outputs equal the reference while the policy picks widths from what it measures
  (past REPORT_EVERY steps), and the log says it is the default and shows what ran;
- the same server switched at runtime (`/set_internal_state`: whole blocks, one width a batch,
  the default again): outputs equal the reference, and the log shows what ran under each;
- under the overlap worker (host-sync check on), forced per-request lengths and adaptive (which
  verifies per-request lengths where it is not exploring), sampled requests at
  law_matrix.SETTINGS (temperatures, filters, a penalty) follow the target's law, controls fail;
Hybrid (Gated DeltaNet) targets commit their recurrent state at every width in
test_hybrid_worker.py, whose extra_buffer_lazy and no_buffer servers run forced width cycles.

Four servers, one at a time.
"""

from __future__ import annotations

import ast
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from dflash_sglang.width.controller import ADAPTIVE_ENV, REPORT_EVERY, WIDTHS_ENV
from dflash_sglang.width.request_lengths import FORCED_LENGTHS_ENV, PARTIAL_DRAFTER_ENV
from dflash_sglang.width.runtime_switch import LENGTHS, WIDTH
from dflash_sglang_tools.testing.server import SGLangServer

from .broken_drafters import drafter, drafter_weights
from .conftest import OVERLAP_CHECKED, PLAIN, dflash_args
from .law_matrix import assert_every_setting_follows_the_law
from .pairs import load, reference, word_prompts
from .step_records import (
    assert_each_step_accepted_what_the_reference_does,
    assert_the_target_saw_what_the_policy_chose,
    drafted_after_plain,
    read_steps,
    record_env,
)

BLOCK = 8
MAX_NEW = 32
CYCLE = "8,1,4,2,8,3,1,6"
# The partial drafter (DFLASH_SGLANG_PARTIAL_DRAFTER, off by default) has its own server: its plain
# rows' drafts come from zero features, whose near-uniform q leaves the residual near p, so the
# law test there would lose the power to catch ragged_bonus_from_residual (tests/planted/).
PARTIAL = {**OVERLAP_CHECKED, PARTIAL_DRAFTER_ENV: "1"}
WORKERS = {
    "overlap-per-request": (OVERLAP_CHECKED, FORCED_LENGTHS_ENV),
    "overlap-partial-drafter": (PARTIAL, FORCED_LENGTHS_ENV),
    "sync": (PLAIN, WIDTHS_ENV),
}
STARTUP = {FORCED_LENGTHS_ENV: "forced per-request lengths", WIDTHS_ENV: "forced cycle"}


@pytest.fixture(scope="module")
def pair(pair8):
    return pair8


@pytest.fixture(scope="module")
def prompt_ids(pair):
    return word_prompts(pair)


@pytest.fixture(scope="module", params=sorted(WORKERS))
def server(request, pair, tmp_path_factory):
    worker, switch = WORKERS[request.param]
    steps = tmp_path_factory.mktemp("steps")  # what each step handed the target (step_records.py)
    env = {**worker, switch: CYCLE, **record_env(steps)}
    with SGLangServer(pair.target, dflash_args(pair, BLOCK), env=env) as server:
        server.kind, server.switch, server.steps = request.param, switch, steps
        yield server


def test_the_startup_log_names_the_forced_cycle(server):
    cycle = CYCLE.replace(",", ", ")
    assert f"verify width {STARTUP[server.switch]} [{cycle}]" in server.log_path.read_text()


def test_greedy_equals_the_reference_alone_concurrently_and_on_a_radix_hit(pair, server, prompt_ids):
    refs = [reference(pair, ids, MAX_NEW, BLOCK) for ids in prompt_ids]
    want = [ref.tokens for ref in refs]
    alone = [server.generate(ids, MAX_NEW) for ids in prompt_ids[:4]]
    assert [out["output_ids"] for out in alone] == want[:4]
    assert max(out["meta_info"]["spec_accept_length"] for out in alone) > 1  # wide steps accepted drafts
    # Narrow steps took place: more verify steps than the whole-block chain needs.
    steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
    assert steps > sum(len(ref.accept_lengths) for ref in refs[:4])
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda ids: server.generate(ids, MAX_NEW), prompt_ids))
    assert [out["output_ids"] for out in together] == want
    again = server.generate(prompt_ids[-1], MAX_NEW)
    assert again["meta_info"]["cached_tokens"] > 0 and again["output_ids"] == want[-1]


def test_each_step_accepted_what_the_reference_does_at_the_lengths_it_verified(pair, server, prompt_ids):
    """The step record (step_records.py): every step's verify is what the cycle chose, and each
    request's steps, plain ones among them, commit what the engine-free drafter commits at the same
    lengths when it has seen every committed position's features. Plain steps hold their context
    until the drafter reads (step/deferred_context.py): a flush lost or late shows here."""
    alone = [(ids, server.generate(ids, MAX_NEW)) for ids in prompt_ids[:2]]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda ids: (ids, server.generate(ids, MAX_NEW)), prompt_ids))
    steps = read_steps(server.steps)
    assert_the_target_saw_what_the_policy_chose(steps)
    checked = assert_each_step_accepted_what_the_reference_does(pair, steps, alone + together, BLOCK)
    after_plain = drafted_after_plain(steps)  # the deferral ran: drafts read what plain steps held
    assert checked >= 40 and after_plain >= 5, (checked, after_plain)
    # A dense target without graphs: every whole-batch plain step ran SGLang's decode forward
    # (step/plain_forward.py), not the width-1 verify it replaces.
    plain = [
        step["target"]
        for step in steps
        if step["target"]["layout"] == "whole" and set(step["target"]["lengths"]) == {1}
    ]
    assert plain and all(target.get("decode") for target in plain), plain[:3]


@pytest.fixture(scope="module")
def adaptive(pair, tmp_path_factory):
    steps = tmp_path_factory.mktemp("steps")
    env = {**OVERLAP_CHECKED, ADAPTIVE_ENV: "", **record_env(steps)}  # unset: the default
    args = [*dflash_args(pair, BLOCK), "--enable-metrics"]  # the operator's gauges (below)
    with SGLangServer(pair.target, args, env=env) as server:
        server.steps = steps
        yield server


def test_the_adaptive_width_is_exact_and_reports_what_ran(pair, adaptive, prompt_ids):
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    alone = [adaptive.generate(ids, MAX_NEW) for ids in prompt_ids * 2]  # twice: past REPORT_EVERY steps
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda ids: adaptive.generate(ids, MAX_NEW), prompt_ids))
    steps = sum(out["meta_info"]["spec_verify_ct"] for out in alone)
    log = adaptive.log_path.read_text()
    assert [out["output_ids"] for out in alone] == want * 2
    assert [out["output_ids"] for out in together] == want
    assert f"verify width adaptive (the default here; {ADAPTIVE_ENV}=0 turns it off)" in log
    assert steps >= REPORT_EVERY and f"verify widths of the last {REPORT_EVERY} steps" in log
    ran = set().union(*(widths for widths in reported_widths(log)))
    assert len(ran) >= 2, f"the policy ran only widths {ran}: it did not adapt"
    # What reached the target (step_records.py): the policy's lengths, ragged where it chose them
    # (greedy requests alike: few or none; the mixed batch below has them), each request's
    # acceptance recorded at its own length, its commits the reference's at the lengths it verified.
    steps = read_steps(adaptive.steps)
    assert_the_target_saw_what_the_policy_chose(steps)
    assert any(step["recorded"] for step in steps)  # the policy paired its acceptance
    served = [*zip(prompt_ids * 2, alone, strict=True), *zip(prompt_ids, together, strict=True)]
    assert_each_step_accepted_what_the_reference_does(pair, steps, served, BLOCK)


def test_the_policy_switched_at_runtime_stays_exact_and_runs_what_it_says(pair, adaptive, prompt_ids):
    """`/set_internal_state` (width/runtime_switch.py): whole blocks, then one width a batch, then
    the default again, each burst equal to the reference; each switch logs the steps before it
    (whole blocks: only width 8; one width a batch: no ragged step); a bad value is refused."""
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    switches = [{WIDTH: BLOCK}, {WIDTH: 0, LENGTHS: 0}, {LENGTHS: 1}]
    try:
        for switch in switches:
            assert adaptive.post("/set_internal_state", {"server_args": switch}) == [True]
            with ThreadPoolExecutor(8) as pool:
                outs = list(pool.map(lambda ids: adaptive.generate(ids, MAX_NEW), prompt_ids))
            assert [out["output_ids"] for out in outs] == want, switch
        assert adaptive.post("/set_internal_state", {"server_args": {LENGTHS: 2}}) == [False]
    finally:
        adaptive.post("/set_internal_state", {"server_args": {WIDTH: 0, LENGTHS: 1}})
    assert adaptive.generate(prompt_ids[0], MAX_NEW)["output_ids"] == want[0]
    log = adaptive.log_path.read_text()
    assert f"{LENGTHS}=2: expected 0 (off) or 1 (on)" in log
    whole_blocks = switched_from(log, f"{WIDTH}=0")  # the steps that ran under whole blocks
    assert whole_blocks["steps"] > 0 and set(whole_blocks["widths"]) == {BLOCK}, whole_blocks
    one_width = switched_from(log, f"{LENGTHS}=1")  # ... and under one width a batch
    assert one_width["steps"] > 0 and one_width["ragged"] == 0, one_width
    # ... and what reached the target under each: whole blocks, then no ragged verify
    steps = read_steps(adaptive.steps)
    assert_the_target_saw_what_the_policy_chose(steps)
    fixed = [step for step in steps if step["chose"]["fixed_width"] == BLOCK]
    assert fixed and all(step["target"]["lengths"] == [BLOCK] * len(step["rids"]) for step in fixed)
    off = [step for step in steps if not step["chose"]["per_request"]]
    assert off and all(step["target"]["layout"] == "whole" for step in off)


def test_a_mixed_batch_reaches_the_target_at_each_requests_own_length(pair, adaptive, prompt_ids):
    """Greedy and sampled requests in one batch (drafts fit them unlike: each kind its own pool), as
    users launch the server: the policy gives them lengths of their own, and the step record shows
    the verify ragged exactly there, each request verifying and recorded at its own length. Up to
    four bursts: the policy times and probes before it exploits."""
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    before, ragged = len(read_steps(adaptive.steps)), []
    for _ in range(4):
        with ThreadPoolExecutor(16) as pool:
            greedy = pool.map(lambda ids: adaptive.generate(ids, MAX_NEW), prompt_ids)
            sampled = pool.map(lambda ids: adaptive.generate(ids, MAX_NEW, temperature=1.0), prompt_ids)
            assert [out["output_ids"] for out in greedy] == want and len(list(sampled)) == len(want)
        steps = read_steps(adaptive.steps)[before:]
        assert_the_target_saw_what_the_policy_chose(steps)
        ragged = [step for step in steps if step["target"]["layout"] == "ragged"]
        if ragged:
            break
    assert ragged and all(step["recorded"] for step in ragged), f"no ragged step in {len(steps)}"


def switched_from(log: str, switch: str) -> dict:
    """The first log line of a runtime switch (`dflash_request_lengths=1 from the next step (before
    it: 73 steps, widths {8: 51, 7: 22}, 0 of them ragged)`): what ran before it."""
    line = next(line for line in log.splitlines() if f"{switch} from the next step" in line)
    found = re.search(r"before it: (\d+) steps, widths (\{.*?\}), (\d+) of them ragged", line)
    return {"steps": int(found[1]), "widths": ast.literal_eval(found[2]), "ragged": int(found[3])}


def reported_widths(log: str) -> list[dict]:
    """Every `verify widths of the last N steps: {width: steps}` report of the log, in order."""
    marker = f"verify widths of the last {REPORT_EVERY} steps: "
    return [ast.literal_eval(line.split(marker, 1)[1].strip()) for line in log.splitlines() if marker in line]


@pytest.mark.parametrize("server", ["overlap-per-request"], indirect=True)
def test_the_sampled_law_with_real_filters_across_forced_request_lengths(pair, server, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch, so every length of the cycle samples, ragged."""
    _, target, _ = load(pair.target, pair.draft)
    assert_every_setting_follows_the_law("chain, forced per-request lengths", server, target, prompt_ids)


def test_the_sampled_law_with_real_filters_under_the_adaptive_width(pair, adaptive, prompt_ids):
    """law_matrix.SETTINGS in one mixed batch, at whatever widths the policy picks."""
    _, target, _ = load(pair.target, pair.draft)
    assert_every_setting_follows_the_law(
        "chain, adaptive width (per-request lengths)", adaptive, target, prompt_ids
    )


def test_a_drafter_that_never_fits_drives_the_adaptive_width_to_plain_decoding(pair, adaptive, prompt_ids):
    """A drafter whose every draft is token 0 (never the target's) swapped into the running server:
    the policy's reports turn to plain decoding (width 1), and the output stays exact.

    Ten bursts: the server's pooled acceptance, a new request's prior, still remembers the good
    drafter's later positions, and only exploring steps test drafts once it verifies narrow. After
    six bursts the last report was 94% plain on a quiet machine and 76% in CI beside another
    worker's servers, where a plain step's time nears a drafted one's."""
    want = [reference(pair, ids, MAX_NEW, BLOCK).tokens for ids in prompt_ids]
    before = len(reported_widths(adaptive.log_path.read_text()))
    with drafter(adaptive, drafter_weights(pair.draft), "always_token_0"):
        for _ in range(10):
            with ThreadPoolExecutor(8) as pool:
                outs = list(pool.map(lambda ids: adaptive.generate(ids, MAX_NEW), prompt_ids))
            assert [out["output_ids"] for out in outs] == want
    log = adaptive.log_path.read_text()
    after = reported_widths(log)[before:]
    assert after, "no width report while the useless drafter ran"
    last = after[-1]
    assert last.get(1, 0) >= 0.8 * sum(last.values()), f"widths with a useless drafter: {last}"
    # The operator is told: a warning in the log, and the gauges on /metrics.
    assert "dflash_sglang: plain decoding on " in log
    metrics = adaptive.get_text("/metrics")
    share = [line for line in metrics.splitlines() if line.startswith("dflash_sglang:plain_step_share{")]
    assert share and float(share[0].split()[-1]) >= 0.8, share
