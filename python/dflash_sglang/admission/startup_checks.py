"""Startup errors that name the option: hybrid-target settings under which DFLASH cannot speculate.

SGLang validates the mamba cache strategy with asserts (`handle_mamba_radix_cache`); for DFLASH
one of them has no message at all (track interval smaller than the block) and another names an
internal field (`disable_overlap_schedule`) where our users set an environment flag. The AROUND
hook lets SGLang decide, and only when it refuses a DFLASH setup for a reason we recognise
re-raises the refusal with the options to change.
"""

from __future__ import annotations

from ..errors import DFlashConfigError

TARGET = "sglang.srt.arg_groups.model_hook.handle_mamba_radix_cache"


def explain(view) -> str | None:
    """Why this DFLASH setup on a hybrid target cannot speculate, or None if not ours to say."""
    if view.speculative_algorithm != "DFLASH" or not view.uses_mamba_radix_cache:
        return None
    strategy = view.mamba_radix_cache_strategy
    block = view.speculative_num_draft_tokens
    if strategy.startswith("extra_buffer") and block is not None and view.mamba_track_interval < block:
        return (
            f"--mamba-track-interval {view.mamba_track_interval} is smaller than the DFLASH block "
            f"(--speculative-num-draft-tokens {block}): the {strategy} strategy can track at most one "
            f"state per verify step, so set --mamba-track-interval to a multiple of the page size "
            f">= {block}"
        )
    if strategy == "no_buffer" and not view.disable_overlap_schedule:
        return (
            "--mamba-scheduler-strategy no_buffer cannot run under the overlap schedule "
            "(SGLANG_ENABLE_SPEC_V2=1 / SGLANG_ENABLE_DFLASH_SPEC_V2=1): unset the flag for the "
            "synchronous DFLASH worker, or use --mamba-scheduler-strategy extra_buffer"
        )
    return None


def check_mamba_strategy(original, server_args, hf_config):
    try:
        return original(server_args, hf_config)
    except AssertionError:
        from sglang.srt.arg_groups.model_override_base import resolved_view

        reason = explain(resolved_view(server_args))
        if reason is None:
            raise
        raise DFlashConfigError(reason) from None
