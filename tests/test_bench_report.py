"""The bench client's outputs: markdown tables, the JSON round trip, the comparison with an
earlier run, and the PNG plots."""

import json

import matplotlib.image
import pytest

from dflash_sglang_tools.bench import report, results
from dflash_sglang_tools.bench.level_stats import summarize
from dflash_sglang_tools.bench.results import BenchRun, RequestResult, ServerRun
from dflash_sglang_tools.bench.runner import write_outputs


def level(concurrency, duration, histogram=()):
    done = [RequestResult(12, 41, 0.2, 2.2, None, sum(histogram), list(histogram))] * 4
    return summarize(done, concurrency, duration, block_size=4 if histogram else None)


@pytest.fixture
def run():
    baseline = ServerRun("no-spec", "http://127.0.0.1:1", "tiny", levels=[level(1, 8.0), level(4, 2.0)])
    dflash = ServerRun(
        "dflash", "http://127.0.0.1:2", "tiny", "DFLASH", 4, "tiny-draft", "our worker",
        levels=[level(1, 4.0, [10, 5, 3, 2]), level(4, 1.6, [10, 5, 3, 2])],
    )  # fmt: skip
    return BenchRun(
        "tiny", 4, 41, 0.0, [1, 4], "no-spec", "2026-01-01", "x86_64", cpus=2, servers=[dflash, baseline]
    )


def test_throughput_table_rows(run):
    lines = report.throughput_table(run).splitlines()
    assert lines[0].startswith("| server | concurrency | output tok/s | speedup")
    assert len(lines) == 2 + 4
    assert lines[2].startswith(
        "| dflash | 1 | 41.0 | 2.00x | 200.0 / 200.0 | 50.00 / 50.00 | 1.85 | 28.3% | 4 (0) |"
    )
    assert lines[3].startswith("| dflash | 4 | 102.5 | 1.25x |")
    assert lines[4].startswith("| no-spec | 1 | 20.5 | baseline |")
    assert "| n/a | n/a |" in lines[4]  # no acceptance without speculation


def test_histogram_and_position_tables(run):
    histogram = report.histogram_table(run).splitlines()
    assert histogram[0] == "| server | verify steps | 0 | 1 | 2 | 3 |"
    assert histogram[2] == "| dflash | 160 | 50.0 | 25.0 | 15.0 | 10.0 |"  # both levels pooled
    positions = report.position_table(run).splitlines()
    assert positions[0] == "| server | % of steps | k=1 | k=2 | k=3 |"
    assert positions[2] == "| dflash | accepted | 50.0 | 25.0 | 10.0 |"
    assert positions[3] == "|  | given k-1 | 50.0 | 50.0 | 40.0 |"


def test_markdown_has_setup_tables_and_plots(run):
    text = report.markdown(run, ["a.png"])
    assert (
        "- **dflash**: `tiny` at http://127.0.0.1:2, DFLASH, block 4, draft `tiny-draft`; our worker" in text
    )
    assert "- **no-spec**: `tiny` at http://127.0.0.1:1, no speculation" in text
    assert text.count("\n### ") == 3 and "![a.png](a.png)" in text
    assert "busy" not in text


def test_a_busy_client_machine_is_flagged(run):
    run.servers[0].levels[1].load_average = 5.5
    assert report.busy(run) == 5.5
    assert "**The client machine was busy** (1-minute load average up to 5.5 on 2 CPUs)" in report.setup(run)
    run.servers[0].levels[1].load_average = 1.5
    assert report.busy(run) is None


def test_json_round_trip(run, tmp_path):
    path = results.save(run, tmp_path / "r.json")
    assert json.loads(path.read_text())["schema"] == results.SCHEMA
    assert results.load(path) == run
    with pytest.raises(ValueError, match="schema"):
        results.from_json('{"servers": []}')


def test_compare_old_and_new(run):
    old = results.from_json(results.to_json(run))
    old.servers[0].levels[0].output_throughput = 20.5
    lines = report.compare(run, old).splitlines()
    assert lines[2] == "| dflash | 1 | 20.5 | 41.0 | 100.0% | 1.85 | 1.85 |"
    assert len(lines) == 2 + 4
    assert report.compare(run, BenchRun("x", 1, 1, 0.0, [1])).startswith("Nothing to compare")


def test_write_outputs_writes_parseable_files(run, tmp_path):
    written = write_outputs(run, tmp_path, "bench")
    assert results.load(written["json"]) == run
    markdown = written["markdown"].read_text()
    pngs = [name for name in written if name.endswith(".png")]
    assert sorted(pngs) == sorted(
        f"bench_{n}.png"
        for n in ("throughput", "tpot", "speedup", "acceptance_histogram", "position_acceptance")
    )
    for name in pngs:
        assert f"![{name}]({name})" in markdown
        assert matplotlib.image.imread(written[name]).shape[0] > 100


def test_model_paths_under_the_working_directory_are_reported_relative(tmp_path, monkeypatch):
    from dflash_sglang_tools.bench.server_info import relative

    monkeypatch.chdir(tmp_path)
    assert relative(str(tmp_path / "pair" / "target")) == "pair/target"
    assert relative("/elsewhere/target") == "/elsewhere/target"
    assert relative("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # a hub id stays as given
    assert relative(None) is None


def test_other_processes_cpu_share_decides_busy_where_measured(run):
    run.servers[0].levels[1].load_average = 5.5  # the servers' own load: not interference
    for server in run.servers:
        for level in server.levels:
            level.foreign_cpu = 0.01
    assert "The machine was quiet (other processes took up to 1% of its 2 CPUs during a level)." in (
        report.setup(run)
    )
    run.servers[1].levels[0].foreign_cpu = 0.3
    assert "**The machine was busy** (other processes took up to 30% of its 2 CPUs" in report.setup(run)


def test_repeated_levels_show_their_ranges_and_mark_no_difference(run):
    dflash, baseline = run.servers
    dflash.levels[0].repeats, baseline.levels[0].repeats = [41.0, 30.0, 50.0], [20.5, 20.0, 21.0]
    dflash.levels[1].repeats, baseline.levels[1].repeats = [102.5, 90.0, 110.0], [82.0, 100.0, 80.0]
    run.repeats = 3
    lines = report.throughput_table(run).splitlines()
    assert lines[2].startswith("| dflash | 1 | 41.0 (30.0-50.0) | 2.00x (1.50-2.38) |")
    assert lines[3].startswith("| dflash | 4 | 102.5 (90.0-110.0) | 1.25x (0.90-1.38) ~ |")
    assert "Each server ran 3 times" in report.markdown(run)


def add_repeated_rival(run, label: str) -> None:
    """A second speculative server beside `dflash`, three repeats each, run side by side."""
    dflash, baseline = run.servers
    rival = ServerRun(label, "http://127.0.0.1:3", "tiny", "DFLASH", 4, "tiny-draft", "another worker",
                      levels=[level(1, 4.0, [10, 5, 3, 2]), level(4, 1.6, [10, 5, 3, 2])])  # fmt: skip
    run.servers.append(rival)
    dflash.levels[0].repeats, rival.levels[0].repeats = [40.0, 30.0, 50.0], [20.0, 30.0, 25.0]
    dflash.levels[1].repeats, rival.levels[1].repeats = [90.0, 110.0, 100.0], [100.0, 100.0, 80.0]
    for lv in baseline.levels:
        lv.repeats = [10.0, 10.0, 10.0]
    run.repeats = 3


def test_one_server_against_each_other_paired_by_repeat_with_a_sign_test(run):
    add_repeated_rival(run, "other")
    rows = report.paired_table(run, "dflash").splitlines()
    assert rows[0] == "| tokens/s ratio | c=1 | c=4 | above 1, all levels (sign test) |"
    # 40/20, 30/30, 50/25: median 2.00, one tie (not above); 0.90, 1.10, 1.25: two above.
    # 4 of 6 above if neither were faster: (15 + 6 + 1) / 64.
    assert rows[2] == "| dflash / other | 2.00 (1.00-2.00), 2/3 | 1.10 (0.90-1.25), 2/3 | 4/6, p 0.344 |"
    assert len(rows) == 3  # no-spec verified nothing: not a speculative server, not compared
    assert "### dflash against each server, paired by repeat" in report.markdown(run, paired_with="dflash")
    assert "paired by repeat" not in report.markdown(run)


def test_each_server_against_the_builtin_paired_by_repeat(run):
    """The tiny-cpu run's bar (issue 59): each of ours over SGLang's built-in, repeat by repeat."""
    add_repeated_rival(run, "sglang built-in")
    rows = report.against_table(run, "sglang built-in").splitlines()
    ratios = "| 2.00 (1.00-2.00), 2/3 | 1.10 (0.90-1.25), 2/3 | 4/6, p 0.344 |"
    assert rows[2] == f"| dflash / sglang built-in {ratios}"
    assert len(rows) == 3
    text = report.markdown(run, against="sglang built-in")
    assert "### Each server against sglang built-in, paired by repeat" in text
    assert "against sglang built-in" not in report.markdown(run)
