"""Whether a DFLASH server on a hybrid target verifies through SGLang's ReplaySSM ring
(`--enable-linear-replayssm-spec`) or keeps a state per block position, and why.

The default (`DFLASH_SGLANG_REPLAY_SSM` unset) is the ring on CUDA wherever it can serve
(`replay_off_because` is None): SGLang's own ring kernels run it there (its EAGLE path uses the
same ones), and a state per position writes B full recurrent states a layer a request each verify,
the bandwidth and memory a GPU lacks (16.4x no-spec's slot at block 16 against the ring's 1.45x,
docs/hybrid.md). On CPU a state per position stays the default for now: the ring's torch stand-ins
ran at 0.91-1.01x its tokens/s there at block 8, a tree's
replay at 0.71-0.93x a state per node's (docs/hybrid.md). `DFLASH_SGLANG_REPLAY_SSM=1` asks for the
ring anywhere (admission/replay_ssm.py declares SGLang's flag, and fails at startup naming why
where it cannot serve), `=0` keeps a state per position; SGLang's own flag still forces the ring.
"""

from __future__ import annotations

from types import SimpleNamespace

from ..environment import REPLAY_SSM

REPLAY_ENV = REPLAY_SSM.name


RING_DEVICES = ("cuda",)  # where the ring is the default: SGLang's own ring kernels run it


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


def ring_by_default(cfg, hf_config) -> bool:
    """With the switch unset: the ring where its kernels run (RING_DEVICES) and it can serve."""
    return serving_device(cfg) in RING_DEVICES and replay_off_because(cfg, hf_config) is None


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
        why = f"the default on {device}; {ask}: SGLang's ReplaySSM ring, the default on CUDA"
    return f"{'a state per tree node' if trees else 'a state per block position'} ({why})"
