"""A mutation survey of the adaptive verify-width policy (width/): one planted bug a function.

    python -m tests.planted.width_survey [NAME ...]

Each entry of SURVEY is one small edit of one line of width/ (a flipped comparison, an off-by-one,
a dropped term, a wrong key or table, a swapped argument), planted as bugs.py's are (plant.py:
into a temporary copy of the package, first on PYTHONPATH), against the engine-free tests that
read the policy (`policy_tests`: every tests/test_*.py that names `dflash_sglang.width`, `width.`
or tests/width_helpers.py). A bug is `caught` where pytest fails (exit 1), `missed` where the
tests pass (exit 0), `broken` otherwise (the edit does not import or collect: fix its text).
One pytest at a time, OMP_NUM_THREADS=1, each under `timeout 300`; logs go to
/tmp/width_survey_logs/NAME.log. The blind spots are the `missed` rows.

Functions left out (nothing to mutate but the storing of arguments or defaults):
PartialSteps.__init__, PolicyLedger.__init__, AcceptanceProfile.__post_init__,
TreeAcceptanceProfile.__post_init__ (they fill empty lists only; no caller passes them filled)
and TreeAcceptance.verified (a docstring only: trees learn from their walk).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bugs import Bug
from .plant import PACKAGE, planted_copy

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path("/tmp/width_survey_logs")

CONTROLLER = "width/controller.py"
RANKING = "width/ranking.py"
STEP_COST = "width/step_cost.py"
STEP_TIMES = "width/step_times.py"
LENGTHS = "width/request_lengths.py"
PROFILES = "width/acceptance_profiles.py"
SWITCH = "width/runtime_switch.py"
SIGNAL = "width/signal.py"

FUNCTIONS: dict[str, str] = {}  # survey name: the function its edit is in

# A chain's and a tree's expected_tokens read alike: told apart by the docstring that follows.
AT_WIDTH, AT_WIDTH_BELOW = (
    "return self.expected_tokens_at([width])[0]",
    "return self.expected_tokens_at([width - 1])[0]",
)
NEXT_DEF = "\n\n    def expected_tokens_at(self, widths: Sequence[int]) -> list[float]:\n        "


def survey(function: str, file: str, old: str, new: str, what: str, paths: str = "chain, tree (adaptive)"):
    return function, Bug(file, old, new, what, paths)


# fmt: off
_ENTRIES = {  # name: (function, Bug)
    # ---------------------------------------------------------------- controller.py
    "drafts_fit_per_batch": survey(
        "drafts_fit", CONTROLLER,
        "return estimate.tokens >= NEW_BATCH_WIDEST_TOKENS * batch_size",
        "return estimate.tokens >= NEW_BATCH_WIDEST_TOKENS",
        "the widest's expected tokens compared with 1.5 for the whole batch, not 1.5 a request: "
        "every new batch size probes the widest, drafts that never fit too",
    ),
    "adaptive_default_under_dp": survey(
        "adaptive_requested", CONTROLLER,
        "return by_default and not dp_attention.enabled()",
        "return by_default",
        "the adaptive width on by default under attention DP (whose ranks must verify whole blocks)",
    ),
    "default_off_flipped": survey(
        "adaptive_default_off_because", CONTROLLER,
        'if getattr(model_runner, "decode_cuda_graph_runner", None) is not None:',
        'if getattr(model_runner, "decode_cuda_graph_runner", None) is None:',
        "the adaptive width off by default where the verify has no graphs, on where it has them",
    ),
    "forced_single_width_under_dp": survey(
        "forced_widths", CONTROLLER,
        "if widths and dp_attention.enabled():",
        "if len(widths) > 1 and dp_attention.enabled():",
        "a forced cycle of one width passes under attention DP (its ranks verify whole blocks)",
        "chain, tree (forced cycle, DP)",
    ),
    "init_per_request_default_flipped": survey(
        "VerifyWidth.__init__", CONTROLLER,
        "per_request_requested(ragged_off_because, not tree_nodes)",
        "per_request_requested(ragged_off_because, bool(tree_nodes))",
        "per-request lengths on by default for trees and off for chains (the default flipped)",
    ),
    "describe_trees_reason_flipped": survey(
        "VerifyWidth.describe", CONTROLLER,
        'why = f"{LENGTHS_ENV}=0" if asked_off or not self.trees else TREES_ONE_BUDGET',
        'why = f"{LENGTHS_ENV}=0" if asked_off or self.trees else TREES_ONE_BUDGET',
        "the startup line names the trees' reason for a chain's one width a batch and vice versa",
        "chain, tree (startup line)",
    ),
    "switch_zero_fixes_the_block": survey(
        "VerifyWidth.switch", CONTROLLER,
        "self.ledger.fixed_width = int(value) or None",
        "self.ledger.fixed_width = int(value) or self.widest",
        "dflash_verify_width=0 fixes the whole block instead of handing the choice back to the policy",
        "chain, tree (runtime switch)",
    ),
    "forced_lengths_cycle_stuck": survey(
        "VerifyWidth.choose", CONTROLLER,
        "lengths = forced_lengths(self.forced_lengths, self.steps, len(batch.reqs), self.widest)",
        "lengths = forced_lengths(self.forced_lengths, 0, len(batch.reqs), self.widest)",
        "the forced per-request cycle never advances: each request always verifies the same length",
        "chain (forced request lengths)",
    ),
    "plan_drafts_part_without_partial_drafter": survey(
        "VerifyWidth.plan", CONTROLLER,
        "drafted = drafted_rows(per_request) if self.partial_drafter else None",
        "drafted = drafted_rows(per_request)",
        "every ragged step drafts only its requests of length > 1, partial drafter asked for or not",
        "chain (per-request lengths)",
    ),
    "report_never_clears": survey(
        "VerifyWidth.report", CONTROLLER,
        "        self.ran.clear()\n",
        "",
        "the widths that ran are never cleared: each report (log, signal, gauges) covers every step "
        "since startup, not the last REPORT_EVERY",
    ),
    "ragged_step_timed_as_plain": survey(
        "VerifyWidth.adaptive_choice", CONTROLLER,
        "batch_size, max(2, round(total / batch_size)), total, drafted",
        "batch_size, max(1, round(total / batch_size)), total, drafted",
        "a mostly plain ragged step (mean length < 1.5) filed as a plain step: plain decoding "
        "priced with the drafter's forward in it",
        "chain (per-request lengths)",
    ),
    "explore_later_max": survey(
        "VerifyWidth.explore_later", CONTROLLER,
        "min(2 * self.explore_every, EXPLORE_AT_MOST_EVERY) if plain_wins else EXPLORE_EVERY",
        "max(2 * self.explore_every, EXPLORE_AT_MOST_EVERY) if plain_wins else EXPLORE_EVERY",
        "the backoff of exploring steps while plain wins is not capped: 64, 128, 256, ... steps",
    ),
    "drafting_wins_max": survey(
        "VerifyWidth.drafting_wins", CONTROLLER,
        "self.next_explore = min(self.next_explore, self.steps + EXPLORE_EVERY)",
        "self.next_explore = max(self.next_explore, self.steps + EXPLORE_EVERY)",
        "a step rating a drafted width best pushes the next exploring step further off, not nearer",
    ),
    "step_done_tree_walk_at_batch_width": survey(
        "VerifyWidth.step_done", CONTROLLER,
        "self.acceptance.walked(reqs, walk, verified.accepted.lengths, plan.lengths)",
        "self.acceptance.walked(reqs, walk, verified.accepted.lengths)",
        "a ragged tree step's walk recorded at the batch's budget, not each request's own",
        "tree (per-request budgets)",
    ),
    # ---------------------------------------------------------------- ranking.py
    "estimate_str_seconds_as_ms": survey(
        "Estimate.__str__", RANKING,
        'f"{self.width}: {self.tokens:.1f} tok / {1000 * self.seconds:.1f} ms"',
        'f"{self.width}: {self.tokens:.1f} tok / {self.seconds:.1f} ms"',
        "the log line's estimates print seconds labelled ms",
        "chain, tree (log)",
    ),
    "worth_a_look_against_the_worst": survey(
        "worth_a_look", RANKING,
        "best = ranked[0]\n    estimate = next(",
        "best = ranked[-1]\n    estimate = next(",
        "the widest's rate measured against the worst-rated width: early widest steps always taken",
    ),
    "plain_could_win_and": survey(
        "plain_could_win", RANKING,
        "return best.width == 1 or plain_rate >= best.tokens / best.seconds",
        "return best.width == 1 and plain_rate >= best.tokens / best.seconds",
        "a new batch size's plain step timed only where plain is already rated best",
    ),
    "ranked_no_plain_margin": survey(
        "ranked_widths", RANKING,
        "if best.tokens / best.seconds < (1 + plain_margin) * plain.tokens / plain.seconds:",
        "if best.tokens / best.seconds < plain.tokens / plain.seconds:",
        "plain decoding loses its margin: a drafted width a hair ahead of plain ranks first",
    ),
    # ---------------------------------------------------------------- step_cost.py
    "target_from_plain_curve": survey(
        "StepCost.target", STEP_COST,
        "return interpolate(self.points, tokens)",
        "return interpolate(self.plain_points or self.points, tokens)",
        "the verify-token curve read from the plain steps' curve (by batch size) where there is one",
    ),
    "step_without_host_gap": survey(
        "StepCost.step", STEP_COST,
        "return self.forward(batch_size, width) + self.between_steps",
        "return self.forward(batch_size, width)",
        "a step priced without the host's work between steps: narrow widths look cheaper",
    ),
    "plain_floor_smallest_batch": survey(
        "StepCost.plain_floor", STEP_COST,
        "return (below[-1] if below else 0.0) + self.between_steps",
        "return (below[0] if below else 0.0) + self.between_steps",
        "the plain floor taken at the smallest batch size timed, not the largest below: plain "
        "decoding looks cheaper, so new batch sizes time plain steps where it cannot win",
    ),
    "forward_plain_not_capped": survey(
        "StepCost.forward", STEP_COST,
        "return min(plain, *(seconds for _, seconds in own)) if own else plain",
        "return plain",
        "a noisy plain time above the batch size's drafted steps is no longer capped by them",
    ),
    "below_narrowest_under_plain": survey(
        "StepCost.below_narrowest", STEP_COST,
        "return down if plain is None else max(plain, down)",
        "return down",
        "a drafted width below the narrowest timed may be priced under the plain step",
    ),
    "interpolate_last_segment_slope": survey(
        "interpolate", STEP_COST,
        "(x0, y0), (x1, y1) = points[0], points[-1]",
        "(x0, y0), (x1, y1) = points[-2], points[-1]",
        "past the last point the curve extrapolates at the last segment's slope, not the chord's",
    ),
    "partial_record_swapped": survey(
        "PartialSteps.record", STEP_COST,
        "self.recent.append((batch_size, drafted, tokens, seconds))",
        "self.recent.append((batch_size, tokens, drafted, seconds))",
        "a partial step kept with its drafted requests and verify tokens swapped",
        "chain (partial drafter)",
    ),
    "fixed_share_not_normalised": survey(
        "PartialSteps.fixed_share", STEP_COST,
        "shares.append(min(max(((seconds - plain) / uniform - part) / (1 - part), 0.0), 1.0))",
        "shares.append(min(max((seconds - plain) / uniform - part, 0.0), 1.0))",
        "the fixed share not divided by the undrafted part (1 - n/bs): alpha learnt too low",
        "chain (partial drafter)",
    ),
    # ---------------------------------------------------------------- step_times.py
    "gaps_keep_one": survey(
        "StepTimes.__init__", STEP_TIMES,
        "self.gaps: deque = deque(maxlen=15)",
        "self.gaps: deque = deque(maxlen=1)",
        "the host gap between steps is the latest one alone, not the median of the recent 15",
    ),
    "start_drops_ragged_tokens": survey(
        "StepTimes.start", STEP_TIMES,
        "key = (batch_size, width, tokens or batch_size * width, drafted)",
        "key = (batch_size, width, batch_size * width, drafted)",
        "a ragged step filed under its nearest whole width's tokens, not its own total",
        "chain (per-request lengths)",
    ),
    "stop_drops_drafted": survey(
        "StepTimes.stop", STEP_TIMES,
        "self.record(batch_size, width, self.stopped_at - start, tokens, drafted)",
        "self.record(batch_size, width, self.stopped_at - start, tokens)",
        "on the host clock a partial step is filed as a uniform step (its curves priced too low)",
        "chain (partial drafter, CPU)",
    ),
    "record_by_batch_swapped": survey(
        "StepTimes.record", STEP_TIMES,
        "self.add(self.by_batch.setdefault(batch_size, {}), width, seconds)",
        "self.add(self.by_batch.setdefault(width, {}), batch_size, seconds)",
        "a drafted step's own-batch point filed under its width as the batch size and vice versa",
    ),
    "add_keeps_stale_key_stats": survey(
        "StepTimes.add", STEP_TIMES,
        "        self.key_cache.pop((id(table), count), None)\n",
        "",
        "a key's cached statistics never refreshed: its first step's time prices it forever",
    ),
    "points_without_solid_filter": survey(
        "StepTimes.points", STEP_TIMES,
        "self.cached[name] = non_decreasing_levels(keys)",
        "self.cached[name] = pooled_levels(keys)",
        "keys timed once or twice may raise the curve (the SOLID filter skipped)",
    ),
    "curve_from_one_count": survey(
        "StepTimes.curve", STEP_TIMES,
        "if len(self.seconds) < 2 or not self.plain:",
        "if len(self.seconds) < 1 or not self.plain:",
        "the curves exist after one drafted token count: the half width is never timed first",
    ),
    "unmeasured_plain_any_batch": survey(
        "StepTimes.unmeasured_plain", STEP_TIMES,
        "return batch_size not in self.plain",
        "return not self.plain",
        "plain decoding timed at the first batch size only, never at a new one",
    ),
    "unmeasured_width_not_half": survey(
        "StepTimes.unmeasured_width", STEP_TIMES,
        "key=lambda w: abs(2 * w - widest)",
        "key=lambda w: abs(w - widest)",
        "the second width timed before the curves is the widest but one, not the half",
    ),
    "levels_filter_flipped": survey(
        "non_decreasing_levels", STEP_TIMES,
        "if stats[1] >= SOLID or stats[0] <= interpolate(reference, count)",
        "if stats[1] >= SOLID or stats[0] >= interpolate(reference, count)",
        "keys timed fewer than SOLID times kept only where they lie above the solid curve",
    ),
    "key_stats_signed_deviation": survey(
        "key_stats", STEP_TIMES,
        "middle([abs(v - median) for v in recent])",
        "middle([v - median for v in recent])",
        "a key's spread is the median signed deviation (about 0), not the MAD: every key distinct",
    ),
    "middle_upper_median": survey(
        "middle", STEP_TIMES,
        "ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2",
        "ordered[n // 2] if n % 2 else ordered[n // 2]",
        "the median of an even count is its upper middle value, not the mean of the two",
    ),
    "pooled_levels_unweighted_sum": survey(
        "pooled_levels", STEP_TIMES,
        "blocks.append([count, n, n * median, (1.2533 * spread) ** 2 / n])",
        "blocks.append([count, n, median, (1.2533 * spread) ** 2 / n])",
        "a key's sum is its median, not n x median, while its weight is n: pooled levels too low",
    ),
    "indistinct_variance_not_sd": survey(
        "indistinct", STEP_TIMES,
        "return difference < NOISE_Z * (low[3] + high[3]) ** 0.5",
        "return difference < NOISE_Z * (low[3] + high[3])",
        "adjacent keys compared against the variance, not the standard error, of their difference",
    ),
    "relative_noise_absolute": survey(
        "relative_noise", STEP_TIMES,
        "spreads = [1.4826 * dev / median for median, n, dev in keys.values() if n >= SOLID and median > 0]",
        "spreads = [1.4826 * dev for median, n, dev in keys.values() if n >= SOLID and median > 0]",
        "the table's noise is an absolute spread (seconds), used as a share of a key's median",
    ),
    # ---------------------------------------------------------------- request_lengths.py
    "lengths_width_last": survey(
        "RequestLengths.width", LENGTHS,
        "return max(self.lengths)",
        "return self.lengths[-1]",
        "a ragged step's width is its last request's length, not the longest",
        "chain (per-request lengths)",
    ),
    "lengths_total_drafts": survey(
        "RequestLengths.total", LENGTHS,
        "return sum(self.lengths)",
        "return sum(self.lengths) - len(self.lengths)",
        "a ragged step's total counts drafts, not verify positions",
        "chain (per-request lengths)",
    ),
    "lengths_uniform_ends": survey(
        "RequestLengths.uniform", LENGTHS,
        "return min(self.lengths) == max(self.lengths)",
        "return self.lengths[0] == self.lengths[-1]",
        "lengths count as uniform where the first and last requests agree",
        "chain (per-request lengths)",
    ),
    "request_lengths_gain_not_chained": survey(
        "request_lengths", LENGTHS,
        "            chain *= q\n            gains.append((chain, i))",
        "            chain = q\n            gains.append((chain, i))",
        "a position's gain is its own acceptance rate, not the chance all drafts before it fit",
        "chain (per-request lengths)",
    ),
    "tree_steps_by_tokens": survey(
        "tree_request_lengths", LENGTHS,
        "steps.append(((e1 - e0) / (w1 - w0), w1 - w0, e1 - e0, i, w1))",
        "steps.append((e1 - e0, w1 - w0, e1 - e0, i, w1))",
        "a tree's hull steps ranked by tokens, not tokens a node",
        "tree (per-request budgets)",
    ),
    "upper_hull_keeps_first": survey(
        "upper_hull", LENGTHS,
        "while len(hull) >= 2 and cross(hull[-2], hull[-1], (x, y)) >= 0:",
        "while len(hull) >= 3 and cross(hull[-2], hull[-1], (x, y)) >= 0:",
        "the hull's second point is never popped: a point under the chord kept (not concave)",
        "tree (per-request budgets)",
    ),
    "cross_wrong_point": survey(
        "cross", LENGTHS,
        "return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])",
        "return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - b[0])",
        "the cross product's last factor measured from b, not a",
        "tree (per-request budgets)",
    ),
    "ragged_seconds_no_fixed_share": survey(
        "ragged_seconds", LENGTHS,
        "share = part + (1 - part) * cost.partial_fixed",
        "share = part",
        "a partial step priced without the fixed share: drafting part of the batch looks cheap",
        "chain (partial drafter)",
    ),
    "drafted_rows_all": survey(
        "drafted_rows", LENGTHS,
        "rows = [i for i, length in enumerate(lengths) if length > 1]",
        "rows = [i for i, length in enumerate(lengths) if length >= 1]",
        "every request counts as drafted: the partial drafter drafts the whole batch",
        "chain (partial drafter)",
    ),
    "forced_lengths_no_mix": survey(
        "forced_lengths", LENGTHS,
        "lengths = tuple(min(pattern[(step + i) % len(pattern)], widest) for i in range(batch_size))",
        "lengths = tuple(min(pattern[step % len(pattern)], widest) for i in range(batch_size))",
        "a forced cycle of lengths gives every request of a step the same length (never ragged)",
        "chain (forced request lengths)",
    ),
    "env_cycle_widest_refused": survey(
        "env_cycle", LENGTHS,
        "if any(not 1 <= n <= widest for n in cycle):",
        "if any(not 1 <= n < widest for n in cycle):",
        "a forced cycle naming the widest refused",
        "chain, tree (forced cycles)",
    ),
    "per_request_ignores_reason": survey(
        "per_request_requested", LENGTHS,
        "return by_default and off_because is None",
        "return by_default",
        "per-request lengths on by default where the path cannot verify them",
        "chain (per-request lengths)",
    ),
    "partial_drafter_window_flipped": survey(
        "partial_drafter_requested", LENGTHS,
        "if on and window_size is not None:",
        "if on and window_size is None:",
        "the partial drafter refused without a draft window and allowed with one",
        "chain (partial drafter)",
    ),
    "forced_request_lengths_check_flipped": survey(
        "forced_request_lengths", LENGTHS,
        "if lengths and off_because is not None:",
        "if lengths and off_because is None:",
        "forced per-request lengths refused where the path can verify them, allowed where not",
        "chain (forced request lengths)",
    ),
    # ---------------------------------------------------------------- acceptance_profiles.py
    "pool_forget_exponent": survey(
        "pool_forget", PROFILES,
        "return 0.5 ** (1 / POOL_HALF_LIFE)",
        "return 0.5 ** 1 / POOL_HALF_LIFE",
        "the parentheses dropped: the pool keeps 1/128 of its counts a request-step (forgets at once)",
    ),
    "record_tests_one_past_width": survey(
        "AcceptanceProfile.record", PROFILES,
        "for j in range(min(accepted_drafts + 1, width - 1)):",
        "for j in range(min(accepted_drafts + 1, width)):",
        "a step counts the draft after its width as tested (and rejected): censoring off by one",
    ),
    "acceptance_flat_beyond_seen": survey(
        "AcceptanceProfile.acceptance", PROFILES,
        "                prior_rate = rate\n",
        "",
        "each position's prior is the flat Beta prior, not the estimate before it: wide widths look "
        "worthless while the policy verifies narrow",
    ),
    "expected_tokens_one_narrower": survey(
        "AcceptanceProfile.expected_tokens", PROFILES,
        AT_WIDTH + NEXT_DEF + '"""expected_tokens at',
        AT_WIDTH_BELOW + NEXT_DEF + '"""expected_tokens at',
        "a chain's expected tokens at one width read at the width below (the pooled recent drafts)",
    ),
    "expected_tokens_at_one_wider": survey(
        "AcceptanceProfile.expected_tokens_at", PROFILES,
        "return [totals[min(w, len(totals)) - 1] for w in widths]",
        "return [totals[min(w, len(totals) - 1)] for w in widths]",
        "every width rated with the expected tokens of the width above it",
    ),
    "greedy_wrong_key": survey(
        "greedy", PROFILES,
        'return params is None or getattr(params, "top_k", 1) == 1',
        'return params is None or getattr(params, "top_p", 1) == 1',
        "a request counts as greedy by its top_p (1 by default), not its top_k: sampled requests in "
        "the greedy pool",
    ),
    "kind_pools_never_forget": survey(
        "RequestAcceptance.__init__", PROFILES,
        "self.kinds = {kind: AcceptanceProfile(positions, forget=pool_forget) for kind in (True, False)}",
        "self.kinds = {kind: AcceptanceProfile(positions) for kind in (True, False)}",
        "the greedy and sampled pools never forget (only the pool of all requests does)",
    ),
    "entry_kind_evidence_wrong_key": survey(
        "RequestAcceptance._entry", PROFILES,
        "pool = kind if kind.reached[0] >= KIND_POOL_EVIDENCE else self.pooled",
        "pool = kind if kind.accepted[0] >= KIND_POOL_EVIDENCE else self.pooled",
        "a kind's pool starts new requests once it accepted (not tested) 4 drafts at position 1: "
        "a kind whose drafts fail never gets its own prior",
    ),
    "profiles_feed_the_other_kind": survey(
        "RequestAcceptance.profiles", PROFILES,
        "            kind = self.kinds[greedy(req)]\n            histogram",
        "            kind = self.kinds[not greedy(req)]\n            histogram",
        "a greedy request's steps feed the sampled pool and vice versa",
    ),
    "recent_drafts_counts_bonus": survey(
        "RequestAcceptance.recent_accepted_drafts", PROFILES,
        "return self.pooled.expected_tokens(self.positions + 1) - 1",
        "return self.pooled.expected_tokens(self.positions + 1)",
        "the signal's accepted drafts count the bonus token (tokens, not drafts)",
        "chain (signal)",
    ),
    "verified_length_minus_one": survey(
        "RequestAcceptance.verified", PROFILES,
        "self._entry(req)[2].append(width if lengths is None else lengths[i])",
        "self._entry(req)[2].append(width if lengths is None else lengths[i] - 1)",
        "a ragged step's requests paired with their drafts, not their length: censored one short",
        "chain (per-request lengths)",
    ),
    "tree_record_budget_that_ran_learns_nothing": survey(
        "TreeAcceptanceProfile.record", PROFILES,
        "if budget <= budget_ran:",
        "if budget < budget_ran:",
        "the budget a tree step ran at learns nothing from it (only the smaller ones do)",
        "tree (adaptive)",
    ),
    "tree_means_not_monotone": survey(
        "TreeAcceptanceProfile.means", PROFILES,
        "most = max(most, (total + w * prior) / (steps + w))",
        "most = (total + w * prior) / (steps + w)",
        "a larger budget's mean may fall below a smaller one's (nesting ignored)",
        "tree (adaptive)",
    ),
    "tree_expected_tokens_one_narrower": survey(
        "TreeAcceptanceProfile.expected_tokens", PROFILES,
        AT_WIDTH + NEXT_DEF + '"""The bonus token',
        AT_WIDTH_BELOW + NEXT_DEF + '"""The bonus token',
        "a tree's expected tokens at one width read at the width below",
        "tree (adaptive)",
    ),
    "tree_expected_tokens_at_bisect_right": survey(
        "TreeAcceptanceProfile.expected_tokens_at", PROFILES,
        "means[bisect.bisect_left(self.budgets, width)]",
        "means[bisect.bisect_right(self.budgets, width)]",
        "a tree width rated with the next budget's mean (one node more than it holds)",
        "tree (adaptive)",
    ),
    "tree_pool_never_forgets": survey(
        "TreeAcceptance.__init__", PROFILES,
        "self.pooled = TreeAcceptanceProfile(self.budgets, flat, prior_weight=1.0, forget=pool_forget)",
        "self.pooled = TreeAcceptanceProfile(self.budgets, flat, prior_weight=1.0)",
        "a tree server's pooled means (a new request's prior) never forget: POOL_HALF_LIFE ignored",
        "tree (adaptive)",
    ),
    "walked_nodes_as_budgets": survey(
        "TreeAcceptance.walked", PROFILES,
        "else [n - 1 for n in nodes]",
        "else [n for n in nodes]",
        "a ragged tree step's budgets are its node counts (one more than each request's budget)",
        "tree (per-request budgets)",
    ),
    "tree_recent_drafts_smallest": survey(
        "TreeAcceptance.recent_accepted_drafts", PROFILES,
        "return self.pooled.means()[-1]",
        "return self.pooled.means()[0]",
        "the signal's accepted drafts read at the smallest budget, not the whole tree",
        "tree (signal)",
    ),
    "tree_profiles_stale_prior": survey(
        "TreeAcceptance.profiles", PROFILES,
        "            profile.prior_means = pooled  # the server's latest, not what its first steps saw\n",
        "            pass\n",
        "a tree request keeps the pooled means of its first step as its prior",
        "tree (adaptive)",
    ),
    "tree_profile_forgets_newest": survey(
        "TreeAcceptance._profile", PROFILES,
        "for old in list(self.entries)[: self.keep // 2]:",
        "for old in list(self.entries)[self.keep // 2 :]:",
        "when full, the tree profiles forget the newest half (live requests), not the oldest",
        "tree (adaptive)",
    ),
    # ---------------------------------------------------------------- runtime_switch.py
    "refusal_widest_refused": survey(
        "refusal", SWITCH,
        "if value not in range(widths.widest + 1):",
        "if value not in range(widths.widest):",
        "dflash_verify_width=widest (the whole block) refused",
        "chain, tree (runtime switch)",
    ),
    "ledger_counts_every_step_ragged": survey(
        "PolicyLedger.count", SWITCH,
        "self.ragged += ragged",
        "self.ragged += 1",
        "the switch log counts every step as ragged",
        "chain, tree (runtime switch)",
    ),
    "ledger_never_cleared": survey(
        "PolicyLedger.switched", SWITCH,
        "        self.widths.clear()\n",
        "",
        "each switch logs the widths since startup, not since the last switch",
        "chain, tree (runtime switch)",
    ),
    "handlers_without_lengths": survey(
        "add_handlers", SWITCH,
        "for key in (WIDTH, LENGTHS):",
        "for key in (WIDTH,):",
        "dflash_request_lengths never registered: SGLang refuses the switch",
        "chain, tree (runtime switch)",
    ),
    "validate_wrong_key": survey(
        "add_handlers.validate", SWITCH,
        "reason = refusal(key, value, widths)",
        "reason = refusal(WIDTH, value, widths)",
        "every switch validated as dflash_verify_width: request lengths checked as a width",
        "chain, tree (runtime switch)",
    ),
    # ---------------------------------------------------------------- signal.py
    "gauges_rank_zero": survey(
        "WidthSignal.__init__", SIGNAL,
        "self.gauges = make_gauges(tp_rank) if metrics else None",
        "self.gauges = make_gauges(0) if metrics else None",
        "every TP rank's gauges labelled rank 0",
        "chain, tree (metrics)",
    ),
    "signal_warns_every_report": survey(
        "WidthSignal.report", SIGNAL,
        "        self.plain_mostly = mostly\n",
        "",
        "the plain-decoding warning repeats at every report (not once per change), no recovery line",
        "chain, tree (signal)",
    ),
    "gauge_names_underscore": survey(
        "make_gauges", SIGNAL,
        'Gauge(f"dflash_sglang:{name}"',
        'Gauge(f"dflash_sglang_{name}"',
        "the gauges exported under dflash_sglang_* instead of dflash_sglang:*",
        "chain, tree (metrics)",
    ),
}
# fmt: on

SURVEY: dict[str, Bug] = {}
for _name, (_function, _bug) in _ENTRIES.items():
    SURVEY[_name] = _bug
    FUNCTIONS[_name] = _function
del _name, _function, _bug


def policy_tests() -> list[str]:
    """Every engine-free test file that reads the width policy (tests/server is never one)."""
    pattern = re.compile(r"dflash_sglang\.width|width\.|width_helpers")
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").glob("test_*.py")
        if pattern.search(path.read_text())
    )


def check_texts() -> list[str]:
    """Each edit's text found exactly once in the package (a survey entry that plants nothing is none)."""
    problems = []
    for name, bug in SURVEY.items():
        for edit in bug.edits:
            count = (PACKAGE / edit.file).read_text().count(edit.old)
            if count != 1 or edit.old == edit.new:
                problems.append(f"{name}: {edit.file}: found {count} times")
    return problems


def run(bug: Bug | None, name: str, tests: list[str]) -> tuple[int, float, str]:
    """pytest over `tests` with `bug` planted (None: the package as it is): its exit code, seconds
    and first failing test."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"width-survey-{name}-") as folder:
        path = [str(planted_copy(bug, Path(folder)))] if bug is not None else []
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1",
            "PLANTED_BUG": name,
        }
        check = "import dflash_sglang, sys; sys.stdout.write(dflash_sglang.__file__)"
        where = subprocess.run(
            [sys.executable, "-c", check], env=env, cwd=ROOT, capture_output=True, text=True
        )
        if bug is not None and not where.stdout.startswith(folder):
            raise RuntimeError(f"{name}: the planted copy is not what imports ({where.stdout!r})")
        command = ["timeout", "300", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        command += ["--ignore=tests/server", *tests]
        began = time.monotonic()
        result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
        seconds = time.monotonic() - began
    output = result.stdout + result.stderr
    (LOGS / f"{name}.log").write_text(output)
    failed = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return result.returncode, seconds, failed.group(1) if failed else ""


def verdict(rc: int) -> str:
    return {0: "missed", 1: "caught"}.get(rc, f"broken (rc {rc})")


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(SURVEY)
    unknown = [name for name in names if name not in SURVEY]
    if unknown:
        print(f"unknown: {unknown}", file=sys.stderr)
        return 2
    problems = check_texts()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    tests = policy_tests()
    print(f"{len(tests)} test files: {' '.join(tests)}", flush=True)
    rc, seconds, _ = run(None, "none", tests)
    if rc != 0:
        print(f"the unplanted package fails the tests (rc {rc}): see {LOGS}/none.log", file=sys.stderr)
        return 2
    print(f"unplanted: pass ({seconds:.0f} s)", flush=True)
    rows = []
    for name in names:
        rc, seconds, failed = run(SURVEY[name], name, tests)
        rows.append((name, SURVEY[name].file, FUNCTIONS[name], verdict(rc), failed))
        print(f"  {name}: {verdict(rc)} ({seconds:.0f} s) {failed}", flush=True)
    print()
    print("name | file | function | result | first failing test")
    print("--- | --- | --- | --- | ---")
    for row in rows:
        print(" | ".join(row))
    counts = {what: sum(row[3].startswith(what) for row in rows) for what in ("caught", "missed", "broken")}
    print(
        f"\n{counts['caught']} caught, {counts['missed']} missed, {counts['broken']} broken, of {len(rows)}"
    )
    return 0 if not counts["broken"] else 1


if __name__ == "__main__":
    sys.exit(main())
