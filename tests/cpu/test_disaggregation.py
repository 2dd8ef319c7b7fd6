"""cpu/platform/disaggregation.py: without an accelerator the prefill side takes SGLang's host page-index
path and skips the event-fenced early prefix send; with one, SGLang's own paths are untouched.
(End to end, tests/server/test_pd.py: without these, the prefill server's scheduler stops.)"""

from types import SimpleNamespace

import pytest

from dflash_sglang.cpu.platform import disaggregation


@pytest.mark.parametrize("accelerator", [False, True])
def test_the_sender_takes_device_indices_only_with_an_accelerator(monkeypatch, accelerator):
    monkeypatch.setattr(disaggregation, "has_accelerator", lambda: accelerator)

    class Sender:  # Mooncake's sender declares the device path on its class
        supports_host_tensor_indices = True

    def init(sender, mgr, bootstrap_addr, bootstrap_room):
        sender.room = bootstrap_room

    sender = Sender()
    disaggregation.sender_without_device_indices_on_cpu(init, sender, None, "127.0.0.1:1", 7)
    assert sender.room == 7
    assert sender.supports_host_tensor_indices is accelerator


@pytest.mark.parametrize("accelerator", [False, True])
def test_the_early_prefix_send_runs_only_with_an_accelerator(monkeypatch, accelerator):
    monkeypatch.setattr(disaggregation, "has_accelerator", lambda: accelerator)
    sent = []
    scheduler, req = SimpleNamespace(), SimpleNamespace()
    disaggregation.no_early_prefix_send_on_cpu(lambda s, r, allow_send=True: sent.append(r), scheduler, req)
    assert sent == ([req] if accelerator else [])
