"""`make bench` and `make demo` without servers: the pair fallback, the docs section, and the
no-spec launch command the demo derives from the DFLASH server's."""

import inspect
from pathlib import Path

from dflash_sglang_tools.bench import adaptive, mixed_load, suite
from dflash_sglang_tools.demo import plain_args

LAUNCH = (
    "--model-path .tiny/target --speculative-algorithm DFLASH --speculative-draft-model-path .tiny/draft "
    "--speculative-num-draft-tokens 16 --device cpu --dtype float32 --attention-backend torch_native "
    "--max-total-tokens 8192 --sleep-on-idle --host 127.0.0.1 --port 30000 --speculative-x=1 "
    "--trust-remote-code"
)


def test_demo_no_spec_args_drop_speculation_model_host_and_port():
    assert plain_args(LAUNCH) == [
        "--device", "cpu", "--dtype", "float32", "--attention-backend", "torch_native",
        "--max-total-tokens", "8192", "--sleep-on-idle", "--trust-remote-code",
    ]  # fmt: skip


def test_embed_replaces_only_the_marked_section(tmp_path):
    one, tp2 = (
        ("<!-- make bench: begin -->", "<!-- make bench: end -->"),
        ("<!-- make bench tp2: begin -->", "<!-- make bench tp2: end -->"),
    )
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# B\n{one[0]}\nold\n{one[1]}\nbetween\n{tp2[0]}\nold tp2\n{tp2[1]}\nafter\n")
    assert suite.embed(docs, "new tp2", suite.MARKERS["tiny-cpu-tp2"])
    assert suite.embed(docs, "new", suite.MARKERS["tiny-cpu"])
    assert docs.read_text() == f"# B\n{one[0]}\nnew\n{one[1]}\nbetween\n{tp2[0]}\nnew tp2\n{tp2[1]}\nafter\n"
    docs.write_text("no markers")
    assert not suite.embed(docs, "x") and docs.read_text() == "no markers"
    assert not suite.embed(tmp_path / "missing.md", "x")


def test_every_tool_writes_its_section_of_the_one_results_page():
    """`make bench`, `make bench-adaptive` and `make bench-mixed` default to docs/benchmarks.md,
    and that page holds one begin and one end marker for every section they write."""
    default = 'default=Path("docs/benchmarks.md")'
    assert all(default in inspect.getsource(tool.main) for tool in (suite, adaptive, mixed_load))
    text = (Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md").read_text()
    for marker in [*suite.MARKERS.values(), *(marker for _, marker in mixed_load.LOADS.values())]:
        assert text.count(f"<!-- {marker}: begin -->") == 1, marker
        assert text.count(f"<!-- {marker}: end -->") == 1, marker


def test_every_run_starts_with_its_no_spec_baseline_and_tp_runs_at_tp2():
    assert [variants[0].speculative for variants in suite.RUNS.values()] == [False] * len(suite.RUNS)
    assert set(suite.RUNS) <= set(suite.MARKERS)  # adaptive-cpu: bench/adaptive.py's run
    assert all("--tp-size" in v.args and v.env["SGLANG_CPU_OMP_THREADS_BIND"] for v in suite.TP2_VARIANTS)


def test_tree_variants_pass_their_width_as_the_verify_tokens():
    """The suite passes `block` as --speculative-num-draft-tokens: a tree's N must travel there,
    or the drafter's block overrides it (the first tree run measured N = 8 for every tree)."""
    trees = [v for v in suite.TREE_VARIANTS if "--speculative-eagle-topk" in v.args]
    assert [(v.args[1], v.block) for v in trees] == [("4", 16), ("4", 16), ("8", 32), ("8", 64), ("8", 64)]
    assert all("--speculative-num-draft-tokens" not in v.args for v in trees)
    # Fixed trees turn the adaptive width off; the adaptive ones leave the switch unset (the
    # default on CPU), as the seed cards' commands do.
    assert [v.env["DFLASH_SGLANG_ADAPTIVE_WIDTH"] for v in trees] == ["0", "", "0", "0", ""]
    assert [v.label.endswith("adaptive") for v in trees] == [False, True, False, False, True]


def test_missing_trained_pair_falls_back_to_the_random_pair(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(suite, "RANDOM_PAIR", tmp_path / "random")
    pair, line = suite.resolve_pair(tmp_path / "no-such-pair")
    assert pair == tmp_path / "random"
    assert (pair / "target" / "config.json").is_file() and (pair / "draft" / "config.json").is_file()
    assert "random-weight pair" in line
    assert "no trained tiny pair at" in capsys.readouterr().err
    assert suite.resolve_pair(pair) == (pair, f"pair {pair}")
