"""DFlash speculative decoding for SGLang: block-diffusion drafts, verified losslessly."""

__version__ = "0.1.0"
