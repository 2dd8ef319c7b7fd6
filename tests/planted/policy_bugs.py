"""Planted bugs of the adaptive verify-width policy (width/, its seams in step/ and sampling/).

The policy decides how many drafts each request verifies; whatever it decides, the step stays
exact (the target verifies what it is given, the commit keeps the longest correct prefix), so no
lossless or law test can see a bug of its wiring: a server with one of these bugs emits the same
tokens, only slower. Each is an edit of one file of the package, planted as bugs.py's are
(plant.py), and each is caught by an engine-free test (`caught_by`, pytest node ids from the
repository's root; docs/reliability.md's "Planted policy bugs" table), or where no engine-free
test can reach the seam, by a server test that reads what reached the target (`CAUGHT_ON_A_SERVER`:
tests/server/step_records.py). The exception that proves the rule is `narrow_wrong_rows`: q's rows
of other requests break the sampled law too. tests/test_policy_bugs.py checks that every edit still
finds its text and every named test exists, and plants one.
"""

from __future__ import annotations

from .bugs import Bug

VERIFY_WIDTH = "width/controller.py"

POLICY_BUGS = {
    "ragged_verify_off": Bug(
        "step/verifying.py",
        "lengths = block.plan.lengths  # per-request lengths, or None: the whole block for all",
        "lengths = None  # (planted) per-request lengths ignored by the verify",
        "per-request lengths switched off in the verify: every request verifies the step's longest length",
        "chain, tree (per-request lengths)",
    ),
    "recorded_at_batch_width": Bug(
        VERIFY_WIDTH,
        "self.acceptance.verified(batch.reqs, width, lengths.lengths)",
        "self.acceptance.verified(batch.reqs, width)",
        "a ragged step's acceptance recorded against the batch width, not each request's own length",
        "chain, tree (per-request lengths)",
    ),
    "probes_overwritten_by_lengths": Bug(
        VERIFY_WIDTH,
        "if self.per_request and width == ranked[0].width:  # not exploring: each its own",
        "if self.per_request:  # (planted) exploring steps too",
        "exploring and first-burst (widest) steps overwritten by per-request lengths",
        "chain, tree (per-request lengths)",
    ),
    "pool_never_forgets": Bug(
        "width/acceptance_profiles.py",
        "return 0.5 ** (1 / POOL_HALF_LIFE)",
        "return 1.0",
        "the pooled acceptance (a new request's prior) never forgets: POOL_HALF_LIFE ignored",
        "chain, tree (adaptive)",
    ),
    "never_explores": Bug(
        VERIFY_WIDTH,
        "elif self.steps >= self.next_explore:",
        "elif self.steps >= self.next_explore + 10**9:",
        "an exploring step never taken: a policy settled on plain decoding never sees drafts again",
        "chain, tree (adaptive)",
    ),
    "signal_only_with_metrics": Bug(
        VERIFY_WIDTH,
        "self.signal = WidthSignal(metrics, tp_rank) if self.adaptive else None",
        "self.signal = WidthSignal(metrics, tp_rank) if self.adaptive and metrics else None",
        "the width signal never fires without --enable-metrics: no warning of plain decoding",
        "chain, tree (adaptive)",
    ),
    "partial_steps_timed_as_uniform": Bug(
        VERIFY_WIDTH,
        "drafted = len(rows) if self.partial_drafter and rows is not None else None",
        "drafted = None",
        "a ragged step drafting part of the batch timed as a uniform step (its curves priced too low)",
        "chain (partial drafter)",
    ),
    "lagged_pairing_newest_first": Bug(
        "width/acceptance_profiles.py",
        "width = pending.popleft() if pending else self.positions + 1",
        "width = pending.pop() if pending else self.positions + 1",
        "a request's accepted drafts paired with the newest width verified, not the oldest (overlap lag)",
        "chain (adaptive)",
    ),
    "fixed_width_unpaired": Bug(
        VERIFY_WIDTH,
        "                self.acceptance.profiles(batch.reqs)\n"
        "                self.acceptance.verified(batch.reqs, width)\n",
        "                self.acceptance.profiles(batch.reqs)\n",
        "a fixed narrow width (/set_internal_state) leaves its steps unpaired: they count as the widest's",
        "chain, tree (runtime switch)",
    ),
    "tp_ranks_choose_alone": Bug(
        VERIFY_WIDTH,
        "width, lengths = self.tp_group.broadcast_object((width, lengths))",
        "pass  # (planted) each TP rank keeps the width and lengths its own timings chose",
        "under TP each rank takes its own width and lengths (rank 0's choice never broadcast)",
        "chain, tree (adaptive, --tp-size > 1)",
    ),
    "deferred_flush_skipped": Bug(
        "step/drafting.py",
        "        self.context.flush()  # the context the plain steps since the last draft committed\n",
        "",
        "the drafter reads the draft KV before the plain steps' held context is written (it lands at "
        "the next drafted commit or after FLUSH_EVERY plain steps): drafts from stale context",
        "chain, tree (plain steps: the adaptive width, forced cycles)",
    ),
    "narrow_wrong_rows": Bug(
        "sampling/sampled_drafts.py",
        "rows = torch.arange(bs * size, device=self.q_draft.device).view(bs, size)[:, :n_draft].flatten()",
        "rows = torch.arange(bs * n_draft, device=self.q_draft.device)",
        "DraftProposal.narrow(k) takes q's first bs * k rows (other requests' positions), not each "
        "request's first k (this one breaks the sampled law as well)",
        "sampled chain (adaptive)",
    ),
    # Issue 64: the layout a plan reaches the target with, and what a step's time is filed under.
    "uniform_lengths_verified_ragged": Bug(
        VERIFY_WIDTH,
        "        if lengths is not None and lengths.uniform:\n",
        "        if lengths is not None and lengths.uniform and False:  # (planted)\n",
        "per-request lengths that all agree still reach the target ragged (the flat layout, no graphs) "
        "instead of one width a batch",
        "chain (adaptive, per-request lengths)",
    ),
    "plain_step_through_the_chain_rule": Bug(
        "step/verifying.py",
        "return self.plain_rule if block.plan.width == 1 else self.chain_rule",
        "return self.chain_rule  # (planted) a plain step through the speculative rule",
        "a step verifying no draft draws its token through the speculative verify (row laws, coins), "
        "not SGLang's own sampler: exact, but it costs more than a no-spec step",
        "chain, tree (plain steps)",
    ),
    "ragged_step_filed_at_the_batch_width": Bug(
        VERIFY_WIDTH,
        "batch_size, max(2, round(total / batch_size)), total, drafted",
        "batch_size, width, total, drafted",
        "a ragged step's time filed under the batch's longest length, not its nearest whole width: "
        "the widest's curve priced at a mostly plain step's cost",
        "chain (adaptive, per-request lengths)",
    ),
    "mostly_plain_ragged_step_filed_as_plain": Bug(
        VERIFY_WIDTH,
        "batch_size, max(2, round(total / batch_size)), total, drafted",
        "batch_size, max(1, round(total / batch_size)), total, drafted",
        "a mostly plain ragged step (mean length under 1.5) filed as a plain step: plain decoding priced "
        "with the drafter's forward in it (found by tests/planted/width_survey.py)",
        "chain (adaptive, per-request lengths)",
    ),
    "plain_steps_filed_as_drafted": Bug(
        "width/step_times.py",
        "        elif width == 1:\n",
        "        elif width == 1 and batch_size == 1:  # (planted)\n",
        "a plain step of a batch above 1 filed as a drafted step of batch-size tokens: plain decoding "
        "priced from the drafted curve",
        "chain, tree (adaptive)",
    ),
}

# The engine-free tests that fail with each bug planted (and pass without): pytest node ids.
SEAMS = "tests/test_policy_seams.py"
ACCOUNTING_PROPERTIES = (
    "tests/test_policy_accounting.py::"
    "test_every_plan_is_what_it_says_reaches_the_target_so_and_is_filed_under_its_shape"
)
CAUGHT_BY = {
    "ragged_verify_off": [f"{SEAMS}::test_a_ragged_step_reaches_the_target_as_each_requests_own_positions"],
    "recorded_at_batch_width": [f"{SEAMS}::test_a_ragged_step_is_recorded_at_each_requests_own_length"],
    "probes_overwritten_by_lengths": [
        f"{SEAMS}::test_with_per_request_lengths_a_new_batch_size_still_verifies_the_widest_first",
        f"{SEAMS}::test_with_per_request_lengths_plain_decoding_still_explores",
    ],
    "pool_never_forgets": [
        "tests/test_verify_width.py::test_the_pooled_acceptance_forgets_a_drafter_that_stopped_fitting"
    ],
    "never_explores": [
        "tests/test_verify_width.py::test_adaptive_explores_one_width_wider_every_so_often",
        f"{SEAMS}::test_with_per_request_lengths_plain_decoding_still_explores",
    ],
    "signal_only_with_metrics": [f"{SEAMS}::test_a_server_without_metrics_warns_of_plain_decoding"],
    "partial_steps_timed_as_uniform": [
        f"{SEAMS}::test_a_partial_step_is_timed_apart_from_the_uniform_curves"
    ],
    "lagged_pairing_newest_first": [
        "tests/test_width_stats.py::test_histogram_entries_pair_with_the_widths_they_were_verified_at"
    ],
    "fixed_width_unpaired": [
        "tests/test_runtime_policy.py::test_a_fixed_width_neither_chooses_nor_times_nor_learns_and_0_resumes_the_policy"
    ],
    "narrow_wrong_rows": [f"{SEAMS}::test_narrow_keeps_each_requests_first_k_positions"],
    "uniform_lengths_verified_ragged": [ACCOUNTING_PROPERTIES],
    "plain_step_through_the_chain_rule": [ACCOUNTING_PROPERTIES],
    "ragged_step_filed_at_the_batch_width": [ACCOUNTING_PROPERTIES],
    "plain_steps_filed_as_drafted": [
        "tests/test_policy_accounting.py::test_a_record_lands_in_the_one_table_its_key_names"
    ],
    "mostly_plain_ragged_step_filed_as_plain": [
        "tests/test_policy_accounting.py::test_each_ragged_shape_is_filed_under_the_shape_it_ran"
    ],
}
# Server tests that fail with the bug planted (step_records.py: what each step handed the target):
# the only catchers of bugs whose seam needs an engine, a second line behind the engine-free ones.
VERIFY_WIDTH_SERVER = "tests/server/test_verify_width.py"
MIXED_BATCH = f"{VERIFY_WIDTH_SERVER}::test_a_mixed_batch_reaches_the_target_at_each_requests_own_length"
CAUGHT_ON_A_SERVER = {
    "ragged_verify_off": [MIXED_BATCH],
    "recorded_at_batch_width": [MIXED_BATCH],
    "deferred_flush_skipped": [
        f"{VERIFY_WIDTH_SERVER}::test_each_step_accepted_what_the_reference_does_at_the_lengths_it_verified[sync]"
    ],
    # the first step the ranks choose differently desynchronises the verify's collectives
    "plain_step_through_the_chain_rule": [
        "tests/server/test_plain_steps.py::test_a_plain_step_draws_what_the_no_spec_sampler_draws"
    ],
    "tp_ranks_choose_alone": [
        "tests/server/test_tp.py::test_both_ranks_handed_the_target_the_same_steps_the_policy_chose[overlap]"
    ],
}


def main() -> int:
    """Plant every policy bug and run the tests that should catch it (servers' too): each run must fail."""
    import subprocess
    import sys

    missed = []
    for name in POLICY_BUGS:
        for node in CAUGHT_BY.get(name, []) + CAUGHT_ON_A_SERVER.get(name, []):
            command = [sys.executable, "-m", "tests.planted.plant", name, "--"]
            command += [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node]
            rc = subprocess.call(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"{name:32s} {'caught' if rc == 1 else f'NOT CAUGHT (rc {rc})':18s} {node}", flush=True)
            missed += [] if rc == 1 else [(name, node)]
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
