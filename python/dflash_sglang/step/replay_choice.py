"""Whether a DFLASH server on a hybrid target verifies through SGLang's ReplaySSM ring
(`--enable-linear-replayssm-spec`) or keeps a state per block position, and why.

Opt-in: SGLang's `--enable-linear-replayssm-spec`, or `DFLASH_SGLANG_REPLAY_SSM=1`, which declares
it (admission/replay_ssm.py) and fails at startup naming why where the ring cannot serve. Not the
default: on CPU its stand-ins ran at 0.88-0.93x a state per position's tokens/s (docs/hybrid.md).
"""

from __future__ import annotations

from types import SimpleNamespace

from ..environment import REPLAY_SSM

REPLAY_ENV = REPLAY_SSM.name


def replay_switch() -> bool:
    """`DFLASH_SGLANG_REPLAY_SSM`: 1 the ring, unset or 0 SGLang's flag decides (off unless given)."""
    return REPLAY_SSM.value()


def replay_off_because(cfg, hf_config) -> str | None:
    """Why a DFLASH server on this target keeps SGLang's state per block position, or None."""
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    if hybrid_gdn_config(SimpleNamespace(hf_config=hf_config)) is None:
        return "not a Gated DeltaNet target"
    topk = cfg.speculative_eagle_topk
    if topk is not None and int(topk) > 1:
        return "a draft tree (--speculative-eagle-topk > 1): the ring verify replays a chain"
    if cfg.disaggregation_mode != "null":
        return f"PD disaggregation ({cfg.disaggregation_mode}): not tested with the ring"
    if cfg.enable_linear_replayssm:
        return "--enable-linear-replayssm drives the same ring per decode step"
    decode = cfg.linear_attn_decode_backend or cfg.linear_attn_backend
    if decode not in ("triton", "flashinfer"):
        return f"--linear-attn-decode-backend {decode}: SGLang's ring verify needs triton or flashinfer"
    return None


def scratch_words(ring_on: bool, trees: bool, server_args, hf_config) -> str:
    """The startup log's words for what the verify keeps, and why."""
    if ring_on:
        return "SGLang's ReplaySSM ring, folded every commit"
    if trees:  # SGLang's ring verify reads no parent pointers: a node needs its own state
        return "a state per tree node (SGLang's ring verify replays a chain, not a tree)"
    why = replay_off_because(server_args, hf_config)
    if why is None:
        why = f"the default; {REPLAY_ENV}=1 or --enable-linear-replayssm-spec: SGLang's ReplaySSM ring"
    return f"a state per block position ({why})"
