"""Platform policy (cpu/platform/checks.py) with stand-in server-args records: DFLASH passes SGLang's
device check on cpu only while `_handle_dflash` runs, and a cpu draft keeps torch_native."""

from types import SimpleNamespace

import pytest
from sglang.srt.arg_groups.overrides import resolving_view

from dflash_sglang.cpu.platform import checks as platform_checks


def record(device, draft_backend=None, attention_backend="torch_native"):
    return SimpleNamespace(
        device=device,
        speculative_draft_attention_backend=draft_backend,
        attention_backend=attention_backend,
        prefill_attention_backend=None,
        decode_attention_backend=None,
    )


def declared(server_args, field):
    return [(source, d[field]) for source, d in getattr(server_args, "_resolved_overrides", []) if field in d]


def test_cpu_passes_the_device_check_only_inside_handle_dflash():
    server_args = record("cpu")
    seen = []

    def handle_dflash(sa):
        seen.append(resolving_view(sa).device)  # what SGLang's platform check reads
        platform_checks.keep_torch_native_draft_on_cpu(None, sa)  # _handle_dflash resolves the draft backend

    platform_checks.allow_dflash_on_cpu(handle_dflash, server_args)

    assert seen == ["cuda"]
    assert resolving_view(server_args).device == "cpu"
    assert declared(server_args, "device") == []  # the temporary declaration is gone
    assert declared(server_args, "speculative_draft_attention_backend") == [
        (platform_checks.SOURCE, "torch_native")
    ]


def test_the_device_declaration_is_removed_when_sglang_raises():
    server_args = record("cpu")

    def refuse(sa):
        raise ValueError("other DFLASH validation")

    with pytest.raises(ValueError, match="other DFLASH"):
        platform_checks.allow_dflash_on_cpu(refuse, server_args)
    assert declared(server_args, "device") == []


def test_other_devices_run_sglang_unchanged():
    server_args = record("cuda")
    seen = []
    platform_checks.allow_dflash_on_cpu(lambda sa: seen.append(resolving_view(sa).device), server_args)
    assert seen == ["cuda"]
    assert not hasattr(server_args, "_resolved_overrides")


def test_draft_backend_resolution_outside_a_cpu_dflash_goes_to_sglang():
    calls = []
    platform_checks.keep_torch_native_draft_on_cpu(calls.append, record("cpu"))
    assert len(calls) == 1


def test_an_explicit_other_draft_backend_is_left_to_sglang():
    server_args = record("cpu", draft_backend="triton")
    calls = []
    platform_checks.allow_dflash_on_cpu(
        lambda sa: platform_checks.keep_torch_native_draft_on_cpu(calls.append, sa), server_args
    )
    assert calls == [server_args]
    assert declared(server_args, "speculative_draft_attention_backend") == []


@pytest.mark.parametrize(
    "requested,expected", [(None, "torch_native"), ("torch_native", "torch_native"), ("flashinfer", None)]
)
def test_draft_backend_for_cpu(requested, expected):
    assert platform_checks.draft_backend_for_cpu(requested) == expected


@pytest.mark.parametrize(
    "device,spec_backend,prefill_backend,expected",
    [
        ("cpu", None, "torch_native", "torch_native"),
        ("cpu", "torch_native", "triton", "torch_native"),
        ("cpu", "triton", "torch_native", "sglang"),
        ("cuda", None, "torch_native", "sglang"),
    ],
)
def test_draft_worker_backend_at_runtime(monkeypatch, device, spec_backend, prefill_backend, expected):
    import sglang.srt.runtime_context as context

    monkeypatch.setattr(context, "get_device", lambda: SimpleNamespace(device=device))
    monkeypatch.setattr(
        context, "get_spec", lambda: SimpleNamespace(speculative_draft_attention_backend=spec_backend)
    )
    monkeypatch.setattr(context, "attention_backends", lambda: (prefill_backend, prefill_backend))
    assert platform_checks.draft_worker_backend_on_cpu(lambda **kw: "sglang", algo_label="DFLASH") == expected
