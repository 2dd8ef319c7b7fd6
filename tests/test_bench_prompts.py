"""Benchmark prompts: local files of every record shape, the tiny pair's held-out file or the
built-in list, hub datasets (cached; a clear message without a hub), and the CLI's errors."""

import json

import datasets
import pytest

from dflash_sglang_tools.bench import cli, prompts
from dflash_sglang_tools.bench.prompts import DatasetUnavailable, load_prompts, read_file, take
from dflash_sglang_tools.bench.tiny_prompts import BUILTIN, held_out_file


def user(text):
    return [{"role": "user", "content": text}]


def test_jsonl_records_of_every_shape(tmp_path):
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    lines = ['"plain"', '{"prompt": "p"}', json.dumps({"messages": chat}), '{"turns": ["t1", "t2"]}',
             '{"instruction": "i", "input": "x"}', '{"instruction": "j", "response": "r"}', ""]  # fmt: skip
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines))
    assert read_file(path) == [user("plain"), user("p"), chat, user("t1"), user("i\n\nInput:\nx"), user("j")]


def test_json_list_or_prompts_object(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(["x", {"prompt": "y"}]))
    (tmp_path / "b.json").write_text(json.dumps({"prompts": ["z"]}))
    assert read_file(tmp_path / "a.json") == [user("x"), user("y")]
    assert load_prompts(data=tmp_path / "b.json") == [user("z")]


def test_bad_records_and_missing_files_say_where(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n{"question": "?"}\n')
    with pytest.raises(DatasetUnavailable, match="bad.jsonl, record 2"):
        read_file(tmp_path / "bad.jsonl")
    with pytest.raises(DatasetUnavailable, match="no prompts file"):
        read_file(tmp_path / "missing.jsonl")
    with pytest.raises(DatasetUnavailable, match="unknown dataset"):
        load_prompts("nope")


def test_take_cycles_through_a_small_dataset():
    assert take([user("a"), user("b")], 5) == [user(t) for t in "ababa"]
    with pytest.raises(DatasetUnavailable):
        take([], 1)


def test_tiny_uses_the_pairs_held_out_file_or_the_builtin_prompts(tmp_path):
    assert load_prompts("tiny", pair_dir=tmp_path) == [user(p) for p in BUILTIN]
    assert held_out_file(tmp_path) is None
    (tmp_path / "held_out.jsonl").write_text('{"instruction": "Write f", "response": "def f(): pass"}\n')
    assert held_out_file(tmp_path) == tmp_path / "held_out.jsonl"
    assert load_prompts("tiny", pair_dir=tmp_path) == [user("Write f")]


def test_hub_dataset_is_formatted_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_BENCH_CACHE", str(tmp_path))
    calls = []

    def fake_load(path, config, split):
        calls.append((path, config, split))
        return [{"question": "1+1?"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    expected = [user("1+1?" + prompts.REASON)]
    assert load_prompts("gsm8k") == expected
    assert load_prompts("gsm8k") == expected  # from the cache
    assert calls == [("openai/gsm8k", "main", "test")]
    assert (tmp_path / "gsm8k.jsonl").is_file()


def test_no_hub_gives_a_clear_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DFLASH_BENCH_CACHE", str(tmp_path))

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert cli.main(["--dataset", "gsm8k", "--url", "http://127.0.0.1:9"]) == 2
    error = capsys.readouterr().err
    assert "could not load gsm8k (openai/gsm8k) from the Hugging Face hub: ConnectionError" in error
    assert "--dataset tiny" in error and "--data FILE.jsonl" in error
    assert "Traceback" not in error


def test_unreachable_server_gives_a_clear_message(capsys):
    assert cli.main(["--dataset", "tiny", "--url", "http://127.0.0.1:9"]) == 2
    assert "no OpenAI-compatible server at http://127.0.0.1:9" in capsys.readouterr().err


def test_concurrency_list():
    assert cli.concurrency_list("1,8, 16,32") == [1, 8, 16, 32]
    with pytest.raises(Exception, match="positive integers"):
        cli.concurrency_list("0,2")
