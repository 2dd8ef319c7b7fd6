"""Whether a DFLASH server on a hybrid target verifies through SGLang's ReplaySSM ring
(`--enable-linear-replayssm-spec`) or keeps a state per block position, and why.

The default (`DFLASH_SGLANG_REPLAY_SSM` unset) is the ring wherever it can serve
(`replay_off_because` is None), chosen by device:
- on CUDA, chains and trees: SGLang's own ring kernels run it there (its EAGLE path uses the same
  ones; a tree runs our Triton tree replay), and a state per position writes B full recurrent
  states a layer a request each verify, the bandwidth and memory a GPU lacks (16.55x no-spec's slot
  at block 16 against the ring's 1.45x, docs/hybrid.md);
- on CPU, chains: since the stand-ins' trims (2026-11-29) the chain's ring runs at 0.98x / 1.03x /
  1.04x a state per position's tokens/s at concurrency 1 / 8 / 32 (paired medians of 3 repeats;
  1.03x / 1.05x / 1.04x at one width a batch), for a slot 8x smaller on the trained pair.
  A tree on CPU keeps a state per node: its replay ran at 0.71-0.93x the per-node tree's.
`DFLASH_SGLANG_REPLAY_SSM=1` asks for the ring anywhere (admission/replay_ssm.py declares SGLang's
flag, and fails at startup naming why where it cannot serve), `=0` keeps a state per position;
SGLang's own flag still forces the ring.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..environment import REPLAY_SSM

REPLAY_ENV = REPLAY_SSM.name


# Where the ring is the default, and for which drafts: SGLang's ring kernels (and our tree replay's
# Triton kernel) on CUDA; on CPU the chain's, as fast there as a state per position, not yet a tree's.
RING_DEVICES = {"cuda": ("chain", "tree"), "cpu": ("chain",)}


def replay_switch() -> bool | None:
    """`DFLASH_SGLANG_REPLAY_SSM`: 1 the ring, 0 a state per position (unless SGLang's flag is
    given), unset None: the default (`ring_by_default`)."""
    return REPLAY_SSM.value()


def serving_device(cfg) -> str:
    """The server's device: `--device`, else what SGLang picks on this host (CUDA where present)."""
    if getattr(cfg, "device", None):
        return str(cfg.device)
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def ring_by_default(cfg, hf_config, trees: bool) -> bool:
    """With the switch unset: the ring where it is the default for these drafts (RING_DEVICES:
    `trees`, the operator's --speculative-eagle-topk > 1) and it can serve."""
    on_device = ("tree" if trees else "chain") in RING_DEVICES.get(serving_device(cfg), ())
    return on_device and replay_off_because(cfg, hf_config) is None


def replay_off_because(cfg, hf_config) -> str | None:
    """Why a DFLASH server on this target keeps SGLang's state per block position, or None."""
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    if hybrid_gdn_config(SimpleNamespace(hf_config=hf_config)) is None:
        return "not a Gated DeltaNet target"
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
    if ring_on and trees:
        return "SGLang's ReplaySSM ring, a record per tree node (our tree replay), folded every commit"
    if ring_on:
        return "SGLang's ReplaySSM ring, folded every commit"
    why = replay_off_because(server_args, hf_config)
    if why is None and replay_switch() is False:
        why = f"{REPLAY_ENV}=0"
    elif why is None:
        device, ask = serving_device(server_args), f"{REPLAY_ENV}=1 or --enable-linear-replayssm-spec"
        what = "a tree" if trees else "a chain"
        why = f"the default for {what} on {device}; {ask}: SGLang's ReplaySSM ring, the default on CUDA"
    return f"{'a state per tree node' if trees else 'a state per block position'} ({why})"
