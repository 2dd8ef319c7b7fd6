"""`sampled_accept`'s CUDA branch (sampling/accept_triton.py's kernels, wired in sampled_verify)
draws from the torch path's law, and CPU keeps the torch path.

CI has no GPU. sampled_verify_triton_probe.py runs `sampled_accept` end to end under Triton's
interpreter on CPU (`TRITON_INTERPRET=1`, in a subprocess, ~20 s of CPU) with the branch opened to
CPU tensors, against the same call as CPU runs it, with the same seed: point drafts, sampled
drafts, block verification, each with and without per-request counts, the cards' filter (T 0.6,
top-k 20, top-p 0.95) and min-p 0.05, float32 and bf16 logits, V 300, 48 requests a case; the
row-law kernel too in the "every kernel" cases. The accepted lengths are equal request for request
(the coins are the generator's first [bs, B-1] uniforms on both paths), the accepted prefixes are
the drafts, and the added token is the inverse CDF of the torch path's own final law (captured at
its torch.multinomial) at the kernel path's uniform (the generator's next [bs]); a token may differ
only where that uniform is within 1e-5 of a CDF boundary (none did). Beside it: CPU logits never
reach a kernel, the glue around the kernels reads no device data on the host, and what the kernels
cannot read (DFlash2's candidate walk, no drafts, strided rows) stays torch.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dflash_sglang.sampling import accept_triton, sampled_verify
from dflash_sglang.sampling.sampled_drafts import CandidateProposal
from tests.interpreter_probe import run_probe


@pytest.fixture(scope="module")
def report():
    return run_probe(Path(__file__).with_name("sampled_verify_triton_probe.py"))


def test_the_kernel_branch_accepts_and_draws_as_the_torch_path(report):
    assert len(report) == 11, sorted(report)
    for name, r in report.items():
        assert r["accepted_differ"] == 0 and r["prefix_differ"] == 0, (name, r)
        assert r["tokens_differ_off_boundary"] == 0 and r["token_prob_zero"] == 0, (name, r)
    assert sum(r["tokens_differ"] for r in report.values()) <= 1  # at most one rounding tie


def test_the_cases_reach_rejections_bonuses_every_mode_and_both_filters(report):
    names = " ".join(report)
    for word in ("point", "sampled", "block", "ragged", "min_p", "every kernel", "bf16"):
        assert word in names, word
    assert all(r["rejected"] > 15 for r in report.values())  # residual draws
    assert sum(r["whole_blocks"] > 0 for r in report.values()) >= 9  # bonus draws
    # Control: torch.multinomial's own numbers are another draw of the law, not the kernel's.
    assert all(r["torch_draws_differ"] > 10 for r in report.values())


def test_cpu_keeps_the_torch_path(monkeypatch):
    assert "cpu" not in sampled_verify.TRITON_ACCEPT_DEVICES

    def refuse(*args, **kwargs):
        raise AssertionError("a Triton kernel ran on CPU logits")

    monkeypatch.setattr(accept_triton, "accept", refuse)
    monkeypatch.setattr(accept_triton, "draw", refuse)
    from tests.sampled_verify_triton_probe import FILTERS, inputs

    logits, info, drafts, proposal = inputs(FILTERS["cards"], 1, torch.float32)
    for kwargs in ({}, {"proposal": proposal}, {"proposal": proposal, "block_verification": True}):
        result = sampled_verify.sampled_accept(drafts, logits, info, 6, **kwargs)
        assert ((result.lengths >= 1) & (result.lengths <= 6)).all()


def test_the_kernel_branch_reads_no_device_data_on_the_host(monkeypatch):
    """What runs around the kernels (coins, block weights and masses, q's rows, the tokens) has no
    host read: the kernels stubbed by device-side stand-ins, under the host-sync guard."""
    from dflash_sglang.runtime.host_sync import DeviceDataGuard
    from tests.sampled_verify_triton_probe import FILTERS, inputs

    monkeypatch.setattr(sampled_verify, "TRITON_ACCEPT_DEVICES", ("cpu",))
    monkeypatch.setattr(accept_triton, "accept", lambda logits, law, drafts, *a: drafts[:, 0] * 0 + 1)
    monkeypatch.setattr(accept_triton, "draw", lambda logits, law, drafts, accepted, *a, **k: accepted * 0)
    logits, info, drafts, proposal = inputs(FILTERS["cards"], 2, torch.float32)
    counts = torch.arange(drafts.shape[0]) % 6
    params = [info.temperatures, info.top_ks, info.top_ps, info.min_ps]
    with DeviceDataGuard([logits, drafts, counts, proposal.q_draft, proposal.features, *params]):
        for kwargs in ({}, {"proposal": proposal}, {"proposal": proposal, "block_verification": True}):
            result = sampled_verify.sampled_accept(drafts, logits, info, 6, draft_counts=counts, **kwargs)
    assert result.lengths.shape == (drafts.shape[0],)


def test_what_the_kernels_cannot_read_stays_torch(monkeypatch):
    monkeypatch.setattr(sampled_verify, "TRITON_ACCEPT_DEVICES", ("cpu",))
    logits, drafts = torch.randn(8, 50), torch.zeros(2, 3, dtype=torch.int64)
    assert sampled_verify.takes_kernels(logits, drafts, None)
    assert not sampled_verify.takes_kernels(logits, drafts[:, :0], None)  # nothing to judge
    assert not sampled_verify.takes_kernels(logits.t().contiguous().t(), drafts, None)  # strided rows
    walk = CandidateProposal(torch.ones(2, 3), torch.zeros(2, 3, 4, dtype=torch.int64), torch.ones(2, 3, 4))
    assert not sampled_verify.takes_kernels(logits, drafts, walk)  # DFlash2's walk: no logits for q


def test_the_switch_turns_the_kernels_off():
    code = "from dflash_sglang.sampling import sampled_verify; print(sampled_verify.TRITON_ACCEPT_DEVICES)"
    for value, expected in (("0", "()"), ("1", "('cuda',)")):
        env = {**os.environ, "DFLASH_SGLANG_TRITON_ROW_LAW": value}
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.stdout.strip() == expected, done.stderr[-2000:]
