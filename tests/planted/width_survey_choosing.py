"""The width survey's edits of how the policy chooses and prices (controller.py, ranking.py,
step_cost.py, step_times.py): name -> (function, Bug). tests/planted/width_survey.py runs them."""

from __future__ import annotations

from .survey_edits import (
    CONTROLLER,
    RANKING,
    STEP_COST,
    STEP_TIMES,
    survey,
)

# fmt: off
CHOOSING = {
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
}
# fmt: on
