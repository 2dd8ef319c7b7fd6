"""A gpt-oss server's resolution on cpu (cpu/platform/gpt_oss.py, no_accelerator.py), on SGLang's real
`handle_model_specific_adjustments` and a tiny GptOssForCausalLM checkpoint: SGLang refuses
torch_native for it; with the hook that check passes, nothing else changes and the temporary
declaration is gone; without an accelerator the MoE runner stays off triton_kernels."""

import functools

import pytest
from sglang.srt.arg_groups import model_hook
from sglang.srt.arg_groups.model_overrides import gpt_oss as gpt_oss_overrides
from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view
from sglang.srt.server_args import ServerArgs

from dflash_sglang.cpu.platform import gpt_oss, no_accelerator
from dflash_sglang_tools.testing.tiny_families import write_tiny_family_pair


def unwrapped(fn):
    return getattr(fn, "__wrapped__", fn)  # hooks may already be applied in this process


ADJUST = unwrapped(model_hook.handle_model_specific_adjustments)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {family: write_tiny_family_pair(root / family, family).target for family in ("gpt_oss", "llama")}


def server_args(target, device="cpu", backend="torch_native", **fields):
    return ServerArgs(
        model_path=str(target), device=device, attention_backend=backend, dtype="float32", **fields
    )


def ours_declared(args) -> list:
    return [entry for entry in getattr(args, "_resolved_overrides", []) if entry[0] == gpt_oss.SOURCE]


def test_sglang_refuses_torch_native_for_gpt_oss(targets):
    with pytest.raises(AssertionError, match="GptOssForCausalLM requires one of"):
        ADJUST(server_args(targets["gpt_oss"]))


@pytest.mark.parametrize("split", [False, True])
def test_with_the_hook_the_check_passes_and_nothing_else_changes(targets, split):
    fields = {"prefill_attention_backend": "torch_native", "decode_attention_backend": "torch_native"}
    args = server_args(targets["gpt_oss"], **(fields if split else {}))
    gpt_oss.allow_torch_native_for_gpt_oss_on_cpu(ADJUST, args)
    view = resolved_view(args)
    assert attention_backends_of(view) == ("torch_native", "torch_native")
    assert view.attention_backend == "torch_native"
    assert ours_declared(args) == []
    # The model's own override declarations were made as without the hook.
    assert any(source == "_gpt_oss_overrides" for source, _ in args._resolved_overrides)


@pytest.mark.parametrize(
    "family,device,backend",
    [("llama", "cpu", "torch_native"), ("gpt_oss", "cuda", "torch_native"), ("gpt_oss", "cpu", "triton")],
)
def test_other_servers_resolve_as_sglang_does(targets, family, device, backend):
    args = server_args(targets[family], device=device, backend=backend)
    seen = []
    gpt_oss.allow_torch_native_for_gpt_oss_on_cpu(
        lambda sa: seen.append(attention_backends_of(resolved_view(sa))), args
    )
    assert seen == [(backend, backend)]
    assert ours_declared(args) == []


def test_the_declaration_is_removed_when_sglang_raises(targets):
    args = server_args(targets["gpt_oss"])

    def refuse(sa):
        assert resolved_view(sa).attention_backend == gpt_oss.CHECKED_AS
        raise ValueError("another check")

    with pytest.raises(ValueError, match="another check"):
        gpt_oss.allow_torch_native_for_gpt_oss_on_cpu(refuse, args)
    assert ours_declared(args) == []


def test_without_an_accelerator_the_moe_runner_stays_off_triton_kernels(targets, monkeypatch):
    """The gpt-oss override picks triton_kernels whenever the package imports (it does here)."""
    available = unwrapped(gpt_oss_overrides.is_triton_kernels_available)
    assert available()
    args = server_args(targets["gpt_oss"])
    gpt_oss.allow_torch_native_for_gpt_oss_on_cpu(ADJUST, args)
    assert resolved_view(args).moe_runner_backend == "triton_kernel"

    monkeypatch.setattr(no_accelerator, "has_accelerator", lambda: False)
    hooked = functools.partial(no_accelerator.triton_kernels_need_an_accelerator, available)
    monkeypatch.setattr(gpt_oss_overrides, "is_triton_kernels_available", hooked)
    args = server_args(targets["gpt_oss"])
    gpt_oss.allow_torch_native_for_gpt_oss_on_cpu(ADJUST, args)
    assert resolved_view(args).moe_runner_backend == "auto"


def test_with_an_accelerator_triton_kernels_are_as_sglang_finds_them(monkeypatch):
    monkeypatch.setattr(no_accelerator, "has_accelerator", lambda: True)
    assert no_accelerator.triton_kernels_need_an_accelerator(lambda: True) is True
    assert no_accelerator.triton_kernels_need_an_accelerator(lambda: False) is False
