"""Benchmark prompts: the DFlash paper's datasets from the Hugging Face hub, local files, and the
tiny pair's held-out prompts. Every prompt is a chat (a list of messages) ending in a user turn.

The hub datasets use the prompt formats of z-lab's harness (dflash/benchmark.py), so acceptance
lengths compare with the model cards'; only the first turn of a multi-turn item is sent, as
z-lab's server benchmark does. A hub dataset is cached as JSONL after its first download, so later
runs need no network. Without a hub, DatasetUnavailable says what to do instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path

from .tiny_prompts import BUILTIN, held_out_file

Chat = list[dict]

REASON = "\nPlease reason step by step, and put your final answer within \\boxed{}."


class DatasetUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class HubDataset:
    path: str
    config: str | None
    split: str
    prompt: Callable[[dict], str]


HUB = {
    "gsm8k": HubDataset("openai/gsm8k", "main", "test", lambda row: row["question"] + REASON),
    "math500": HubDataset("HuggingFaceH4/MATH-500", None, "test", lambda row: row["problem"] + REASON),
    "humaneval": HubDataset(
        "openai/openai_humaneval", None, "test",
        lambda row: "Write a solution to the following problem and make sure that it passes the tests:\n"
        f"```python\n{row['prompt']}\n```",
    ),
    "mbpp": HubDataset("google-research-datasets/mbpp", "sanitized", "test", lambda row: row["prompt"]),
    "mt-bench": HubDataset("HuggingFaceH4/mt_bench_prompts", None, "train", lambda row: row["prompt"][0]),
    "alpaca": HubDataset(
        "tatsu-lab/alpaca", None, "train",
        lambda row: row["instruction"] + (f"\n\nInput:\n{row['input']}" if row["input"] else ""),
    ),
}  # fmt: skip
NAMES = [*HUB, "tiny"]


def cache_dir() -> Path:
    return Path(os.environ.get("DFLASH_BENCH_CACHE", Path.home() / ".cache" / "dflash_sglang" / "bench"))


def load_prompts(dataset: str | None = None, data: str | Path | None = None, pair_dir=None) -> list[Chat]:
    """The prompts of `--data FILE` if given, else of the named dataset."""
    if data is not None:
        return read_file(data)
    if dataset == "tiny":
        found = held_out_file(pair_dir)
        return read_file(found) if found else [user(p) for p in BUILTIN]
    if dataset in HUB:
        return read_file(_cached_hub_file(dataset))
    raise DatasetUnavailable(
        f"unknown dataset {dataset!r}; choose one of {', '.join(NAMES)} or pass --data FILE"
    )


def take(prompts: list[Chat], count: int) -> list[Chat]:
    """The first `count` prompts, cycling when the dataset is smaller (as z-lab's harness does)."""
    if not prompts:
        raise DatasetUnavailable("the dataset has no prompts")
    return list(islice(cycle(prompts), count))


def user(text: str) -> Chat:
    return [{"role": "user", "content": text}]


def read_file(path: str | Path) -> list[Chat]:
    """JSONL (one record a line) or JSON (a list of records). A record is a string or an object
    with `messages` (a chat), `prompt`, `turns` (the first is sent) or `instruction` (+ `input`)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetUnavailable(f"no prompts file {path}")
    text = path.read_text()
    if path.suffix == ".json":
        records = json.loads(text)
        records = records.get("prompts", records) if isinstance(records, dict) else records
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [_chat(record, f"{path}, record {i + 1}") for i, record in enumerate(records)]


def _chat(record, where: str) -> Chat:
    if isinstance(record, str):
        return user(record)
    if isinstance(record, dict):
        if isinstance(record.get("messages"), list):
            return record["messages"]
        if isinstance(record.get("prompt"), str):
            return user(record["prompt"])
        if isinstance(record.get("turns"), list) and record["turns"]:
            return user(record["turns"][0])
        if isinstance(record.get("instruction"), str):
            extra = record.get("input") or ""
            return user(record["instruction"] + (f"\n\nInput:\n{extra}" if extra else ""))
    raise DatasetUnavailable(
        f"{where}: expected a string or an object with messages, prompt, turns or instruction"
    )


def _cached_hub_file(name: str) -> Path:
    cached = cache_dir() / f"{name}.jsonl"
    if cached.is_file():
        return cached
    spec = HUB[name]
    try:
        from datasets import load_dataset

        rows = load_dataset(spec.path, spec.config, split=spec.split)
    except Exception as error:  # offline hubs fail in many ways (DNS, LocalEntryNotFound, 401)
        raise DatasetUnavailable(
            f"could not load {name} ({spec.path}) from the Hugging Face hub: {type(error).__name__}: "
            f"{str(error)[:200]}\nOffline? Use --dataset tiny, or --data FILE.jsonl with one "
            '{"prompt": ...} or {"messages": [...]} per line, or put a cached copy at ' + str(cached)
        ) from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    with open(partial, "w") as file:
        for row in rows:
            file.write(json.dumps({"prompt": spec.prompt(row)}) + "\n")
    partial.replace(cached)
    return cached
