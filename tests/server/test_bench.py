"""`python -m dflash_sglang_tools.bench` end to end against two live CPU servers of the hot tiny pair:
our DFLASH worker (the session's plain worker, block 4) and the shared no-spec server as its
baseline. The run writes its markdown, JSON and plots; every number in them is a real
measurement of this run, checked for plausibility and internal consistency (not for speed:
timings are not pass/fail)."""

from __future__ import annotations

import matplotlib.image
import pytest

from dflash_sglang_tools.bench import cli, results

BLOCK = 4  # the shared server's (conftest.SHARED_BLOCK)
CONCURRENCY = [1, 4]
PROMPTS = 8
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def dflash(dflash8_plain):
    return dflash8_plain  # the session's plain worker (conftest.py)


@pytest.fixture(scope="module")
def bench_out(dflash, nospec8, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    argv = ["--url", dflash.base_url, "--label", "dflash", "--baseline-url", nospec8.base_url,
            "--dataset", "tiny", "--num-prompts", PROMPTS, "--concurrency", ",".join(map(str, CONCURRENCY)),
            "--max-tokens", MAX_TOKENS, "--warmup", 1, "--out", out]  # fmt: skip
    assert cli.main([str(a) for a in argv]) == 0
    return out


def test_results_json_has_real_numbers_for_both_servers(bench_out, pair8):
    run = results.load(bench_out / "bench.json")
    assert [s.label for s in run.servers] == ["dflash", "baseline"] and run.baseline == "baseline"
    dflash, baseline = run.servers
    assert (dflash.algorithm, dflash.block_size, dflash.draft_model) == ("DFLASH", BLOCK, str(pair8.draft))
    assert baseline.algorithm is None
    for server in run.servers:
        assert [lv.concurrency for lv in server.levels] == CONCURRENCY
        for level in server.levels:
            assert (level.requests, level.errors) == (PROMPTS, 0)
            assert 0 < level.output_tokens <= PROMPTS * MAX_TOKENS
            assert level.output_throughput > 0 and level.duration_s > 0
            assert 0 < level.ttft_ms.mean <= level.latency_ms.mean and level.tpot_ms.mean > 0


def test_acceptance_comes_from_the_dflash_server_only(bench_out):
    run = results.load(bench_out / "bench.json")
    dflash, baseline = run.servers
    for level in dflash.levels:
        acc = level.acceptance
        assert acc.source == "histogram" and len(acc.histogram) == BLOCK
        assert sum(acc.histogram) == acc.verify_steps > 0
        assert 1.0 <= acc.accept_length <= BLOCK and 0.0 <= acc.accept_rate <= 1.0
        # Each step commits accepted + 1 tokens; only the prefill's first token is not a step's,
        # and a step may accept past max_tokens or EOS, never less than what was returned.
        committed = sum((k + 1) * steps for k, steps in enumerate(acc.histogram))
        assert committed >= level.output_tokens - level.requests
        assert acc.position_accepted == sorted(acc.position_accepted, reverse=True)
    for level in baseline.levels:
        assert level.acceptance.source == "none" and level.acceptance.accept_length is None


def test_markdown_table_and_plots(bench_out):
    """The table's throughputs and speedups are the JSON's, level by level; every plot is a
    real image the markdown links."""
    markdown = (bench_out / "bench.md").read_text()
    run = results.load(bench_out / "bench.json")
    dflash, baseline = run.servers
    rows = [line for line in markdown.splitlines() if line.startswith(("| dflash |", "| baseline |"))]
    assert len(rows) == 2 * len(CONCURRENCY) + 2  # throughput rows, histogram and position rows
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[: 2 * len(CONCURRENCY)]]
    for ours, base, concurrency in zip(dflash.levels, baseline.levels, CONCURRENCY, strict=True):
        row = next(c for c in cells if c[:2] == ["dflash", str(concurrency)])
        assert row[2] == f"{ours.output_throughput:.1f}"
        assert row[3] == f"{ours.output_throughput / base.output_throughput:.2f}x"
        base_row = next(c for c in cells if c[:2] == ["baseline", str(concurrency)])
        assert base_row[2] == f"{base.output_throughput:.1f}" and base_row[3] == "baseline"
    for name in ("throughput", "tpot", "speedup", "acceptance_histogram", "position_acceptance"):
        png = bench_out / f"bench_{name}.png"
        assert f"![{png.name}]({png.name})" in markdown
        assert matplotlib.image.imread(png).ndim == 3


def test_compare_with_the_run_itself(bench_out, dflash, capsys):
    argv = ["--url", dflash.base_url, "--label", "dflash", "--num-prompts", "2", "--concurrency", "1",
            "--max-tokens", "8", "--warmup", "0", "--out", bench_out / "again",
            "--compare", bench_out / "bench.json"]  # fmt: skip
    assert cli.main([str(a) for a in argv]) == 0
    printed = capsys.readouterr().out
    assert "Compared with" in printed and "| dflash | 1 |" in printed.split("Compared with")[1]
