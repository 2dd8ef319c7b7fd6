"""Let SGLang's LoRA layers start on a host without an accelerator.

The LoRA layers and the torch_native LoRA backend stage their batch info with
`torch.tensor(..., pin_memory=True)` and `torch.zeros(..., pin_memory=True)`, which raise
when there is no accelerator (and `Tensor.pin_memory()`, hooked in mamba_policy.py for the same
reason). Pinning only speeds up copies to an accelerator, so with none an unpinned tensor is the
faithful answer; with one, the call is left as it is.
"""

from __future__ import annotations

from .mamba_policy import has_accelerator

FACTORY_TARGETS = ("torch.tensor", "torch.zeros")


def factory_without_pinning(original, *args, **kwargs):
    """AROUND a torch factory: `pin_memory=True` is dropped when there is no accelerator to pin for."""
    if kwargs.get("pin_memory") and not has_accelerator():
        kwargs["pin_memory"] = False
    return original(*args, **kwargs)
