"""The width survey's misses (docs/reliability.md, "Blind spots of width/"), each with the test that
catches it since: tests/test_policy_pricing.py for what the policy prices and learns,
tests/test_policy_reports.py for what it reports and the testing switches it obeys.
tests/test_policy_bugs.py plants a sample of them in CI."""

from __future__ import annotations

PRICING, REPORTS = "tests/test_policy_pricing.py", "tests/test_policy_reports.py"

# survey entry: (the file of its test, the test)
_TESTS = {
    "plain_floor_smallest_batch": (
        PRICING,
        "test_the_plain_floor_is_the_plain_step_of_the_largest_batch_timed_not_above",
    ),
    "below_narrowest_under_plain": (PRICING, "test_a_drafted_width_is_never_priced_below_the_plain_step"),
    "plain_could_win_and": (
        PRICING,
        "test_a_first_plain_step_is_worth_timing_where_plain_at_its_floor_beats_the_best",
    ),
    "points_without_solid_filter": (PRICING, "test_a_key_timed_once_never_raises_the_curve"),
    "relative_noise_absolute": (PRICING, "test_the_timing_noise_is_a_share_of_each_keys_median"),
    "drafting_wins_max": (
        PRICING,
        "test_a_step_rating_a_drafted_width_best_brings_the_next_exploring_step_near",
    ),
    "upper_hull_keeps_first": (PRICING, "test_the_tree_hull_drops_a_point_under_the_chord"),
    "acceptance_flat_beyond_seen": (PRICING, "test_a_position_never_tested_takes_the_estimate_before_it"),
    "kind_pools_never_forget": (PRICING, "test_each_kinds_pool_forgets_a_drafter_that_stopped_fitting"),
    "tree_pool_never_forgets": (PRICING, "test_a_tree_servers_pool_forgets_a_drafter_that_stopped_fitting"),
    "tree_profiles_stale_prior": (PRICING, "test_a_tree_requests_prior_is_the_servers_latest_pool"),
    "tree_profile_forgets_newest": (PRICING, "test_a_full_tree_table_forgets_its_oldest_requests"),
    "step_done_tree_walk_at_batch_width": (
        PRICING,
        "test_a_ragged_tree_step_is_learnt_at_each_requests_own_budget",
    ),
    "estimate_str_seconds_as_ms": (REPORTS, "test_an_estimate_prints_its_seconds_as_milliseconds"),
    "recent_drafts_counts_bonus": (REPORTS, "test_the_signal_reports_accepted_drafts_not_tokens"),
    "tree_recent_drafts_smallest": (REPORTS, "test_a_tree_signal_reports_the_whole_trees_drafts"),
    "report_never_clears": (REPORTS, "test_each_report_covers_only_the_steps_since_the_last"),
    "ledger_counts_every_step_ragged": (REPORTS, "test_the_switch_log_counts_only_ragged_steps_as_ragged"),
    "gauges_rank_zero": (REPORTS, "test_each_tp_rank_labels_its_own_gauges"),
    "forced_single_width_under_dp": (REPORTS, "test_a_forced_width_is_refused_under_attention_dp"),
    "forced_lengths_cycle_stuck": (REPORTS, "test_the_forced_length_cycle_advances_every_step"),
}
CLOSED = {name: f"{path}::{test}" for name, (path, test) in _TESTS.items()}
