"""The installed environment is the one the project pins: SGLang's private interfaces change every
release, so the package must run against exactly sglang 0.5.23."""

from importlib import metadata


def test_sglang_is_pinned_and_installed():
    requires = metadata.requires("dflash-sglang")
    assert "sglang==0.5.23" in requires
    assert metadata.version("sglang") == "0.5.23"
    import sglang  # noqa: F401  (imports on CPU: nothing GPU-only at module level)
