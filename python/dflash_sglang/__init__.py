"""DFlash speculative decoding for SGLang: block-diffusion drafts, verified losslessly.

The plugin SGLang loads (`plugin.py`, through its `sglang.srt.plugins` entry point); its tools live
apart, in dflash_sglang_tools. The step is worker.py (overlap.py under the overlap loop): draft,
verify, commit, wired from settings.py (every startup decision, resolved once). Below it, bottom
to top (docs/architecture.md): errors.py, environment.py (every `DFLASH_SGLANG_*` switch),
runtime/, cpu/, sampling/, tree/, drafter/, width/, step/, admission/.
"""

__version__ = "0.1.0"
