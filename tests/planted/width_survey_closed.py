"""The width survey's misses (docs/reliability.md, "Blind spots of width/"), each with the test that
catches it since: tests/test_policy_pricing.py for what the policy prices and learns,
tests/test_policy_reports.py for what it reports and the testing switches it obeys.
tests/test_policy_bugs.py plants a sample of them in CI."""

from __future__ import annotations

# survey entry -> its test in tests/test_policy_pricing.py
PRICING = {
    "plain_floor_smallest_batch": "test_the_plain_floor_is_the_largest_batch_timed_not_above",
    "below_narrowest_under_plain": "test_a_drafted_width_is_never_priced_below_the_plain_step",
    "plain_could_win_and": "test_a_first_plain_step_is_worth_timing_where_plain_at_its_floor_beats_the_best",
    "points_without_solid_filter": "test_a_key_timed_once_never_raises_the_curve",
    "relative_noise_absolute": "test_the_timing_noise_is_a_share_of_each_keys_median",
    "drafting_wins_max": "test_a_step_rating_a_drafted_width_best_brings_the_next_exploring_step_near",
    "upper_hull_keeps_first": "test_the_tree_hull_drops_a_point_under_the_chord",
    "acceptance_flat_beyond_seen": "test_a_position_never_tested_takes_the_estimate_before_it",
    "kind_pools_never_forget": "test_each_kinds_pool_forgets_a_drafter_that_stopped_fitting",
    "tree_pool_never_forgets": "test_a_tree_servers_pool_forgets_a_drafter_that_stopped_fitting",
    "tree_profiles_stale_prior": "test_a_tree_requests_prior_is_the_servers_latest_pool",
    "tree_profile_forgets_newest": "test_a_full_tree_table_forgets_its_oldest_requests",
    "step_done_tree_walk_at_batch_width": "test_a_ragged_tree_step_is_learnt_at_each_requests_own_budget",
}  # fmt: skip
# survey entry -> its test in tests/test_policy_reports.py
REPORTS = {
    "estimate_str_seconds_as_ms": "test_an_estimate_prints_its_seconds_as_milliseconds",
    "recent_drafts_counts_bonus": "test_the_signal_reports_accepted_drafts_not_tokens",
    "tree_recent_drafts_smallest": "test_a_tree_signal_reports_the_whole_trees_drafts",
    "report_never_clears": "test_each_report_covers_only_the_steps_since_the_last",
    "ledger_counts_every_step_ragged": "test_the_switch_log_counts_only_ragged_steps_as_ragged",
    "gauges_rank_zero": "test_each_tp_rank_labels_its_own_gauges",
    "forced_single_width_under_dp": "test_a_forced_width_is_refused_under_attention_dp",
    "forced_lengths_cycle_stuck": "test_the_forced_length_cycle_advances_every_step",
}  # fmt: skip
CLOSED = {
    **{name: f"tests/test_policy_pricing.py::{test}" for name, test in PRICING.items()},
    **{name: f"tests/test_policy_reports.py::{test}" for name, test in REPORTS.items()},
}
