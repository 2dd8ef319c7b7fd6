"""DFLASH on a Gated DeltaNet target under SGLang's ReplaySSM spec-verify
(`--enable-linear-replayssm-spec`): the pool SGLang refuses to build for it, built.

SGLang 0.5.23 refuses the flag for DFLASH on any non-KDA model when it builds the request pool
(`KVCacheConfigurator._build_hybrid_req_pool`), because its built-in DFLASH worker commits through
the linear-attention backend's fold, which replays only KDA. Our worker commits through SGLang's
`commit_mamba_states_after_verify` instead (step/hybrid.py), the function its EAGLE and n-gram
workers use, which replays GDN; so for our worker the refusal's reason does not hold. The AROUND
hook runs SGLang's pool builder unchanged except that one test: for the duration of the call the
configurator's `hybrid_kda_config` reads as set. Inside that function the attribute is read only by
the refusal and by "GDN or KDA?" (where GDN already answers yes), so nothing else it builds changes.
SGLang's built-in worker (DFLASH_SGLANG_WORKER=builtin) does not install this hook: it keeps the
refusal, which is right for it.

The default wherever it can serve (`replay_when_asked`, step/replay_choice.py): with
`DFLASH_SGLANG_REPLAY_SSM` unset, a DFLASH chain on a Gated DeltaNet target served on CUDA or CPU
(a tree: on CUDA) declares the flag wherever the ring can serve; SGLang's own flag, or
`DFLASH_SGLANG_REPLAY_SSM=1`, asks for it anywhere and fails at startup naming why where it cannot
(PD, another decode backend); `=0` keeps a state per position. A request's recurrent scratch then
shrinks from a full state per block position to a ring of compact records (16.5x -> 1.45x a slot
at block 16, docs/hybrid.md), the output stays the target's. The startup line prices both paths.
"""

from __future__ import annotations

from ..errors import DFlashConfigError
from ..step.replay_choice import REPLAY_ENV, replay_off_because, replay_switch, ring_by_default
from ..tree.switches import requested_topk

TARGET = "sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator._build_hybrid_req_pool"


def replay_asked_for_dflash() -> bool:
    """Whether this server runs DFLASH with `--enable-linear-replayssm-spec`."""
    from sglang.srt.runtime_context import get_exec, get_spec

    algorithm = (get_spec().speculative_algorithm or "").upper()
    return algorithm == "DFLASH" and bool(get_exec().mamba.enable_linear_replayssm_spec)


def build_pool_for_gdn_replay(original, configurator, **kwargs):
    """AROUND _build_hybrid_req_pool: a GDN target's pool for our DFLASH worker, ring and all."""
    if not replay_asked_for_dflash() or configurator.hybrid_gdn_config is None:
        return original(configurator, **kwargs)
    kda = configurator.hybrid_kda_config
    configurator.hybrid_kda_config = configurator.hybrid_gdn_config  # the refusal's test only
    try:
        return original(configurator, **kwargs)
    finally:
        configurator.hybrid_kda_config = kda


# ---- DFLASH_SGLANG_REPLAY_SSM=1: the ring, declared -------------------------------------------

ASK_TARGET = "sglang.srt.arg_groups.model_hook.handle_mamba_radix_cache"
SOURCE = "dflash_sglang.admission.replay_ssm"


def replay_when_asked(server_args, hf_config):
    """BEFORE handle_mamba_radix_cache (the first step that knows the target is hybrid): with
    DFLASH_SGLANG_REPLAY_SSM=1, or unset where the ring is the default and can serve, DFLASH on a GDN chain
    verifies through SGLang's ReplaySSM ring (the flag declared); asked for where it cannot, startup
    fails naming why; with SGLang's flag given, what is
    ours to refuse is refused (PD), SGLang validates the rest."""
    from sglang.srt.arg_groups.overrides import declare_resolution, resolving_view

    cfg = resolving_view(server_args)
    if (cfg.speculative_algorithm or "").upper() != "DFLASH":
        return None
    if cfg.enable_linear_replayssm_spec:
        if cfg.disaggregation_mode != "null":
            raise DFlashConfigError(
                f"--enable-linear-replayssm-spec with --disaggregation-mode {cfg.disaggregation_mode}: "
                "our worker's replayed commit is not tested on a PD server's pools; drop the flag"
            )
        return None
    switch = replay_switch()
    trees = requested_topk(server_args) > 1
    if switch is False or (switch is None and not ring_by_default(cfg, hf_config, trees)):
        return None
    because = replay_off_because(cfg, hf_config)
    if because is not None:  # asked for (the default only declares where it can serve)
        raise DFlashConfigError(f"{REPLAY_ENV}=1: {because}")
    declare_resolution(server_args, SOURCE, enable_linear_replayssm_spec=True)
    return None
