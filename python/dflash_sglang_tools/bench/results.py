"""What a benchmark run produces, as plain dataclasses with a JSON round trip.

A `BenchRun` holds one `ServerRun` per server (the DFLASH server, its baseline, more in
`make bench`), each with one `LevelStats` per concurrency. `RequestResult` is one streamed
request as the client saw it; only the summaries are saved.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

SCHEMA = "dflash_sglang_tools.bench/1"


@dataclasses.dataclass
class RequestResult:
    """One request: client-side timings and what the server reported at the end of the stream."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float = 0.0  # first generated text (or token count) in the stream
    latency_s: float = 0.0  # request sent -> stream closed
    error: str | None = None
    spec_verify_ct: int = 0  # SGLang's verify steps (0: no speculation, or not reported)
    # Verify steps by number of accepted drafts: histogram[k] = steps that accepted k drafts.
    spec_histogram: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Percentiles:
    mean: float | None = None
    p50: float | None = None
    p99: float | None = None


@dataclasses.dataclass
class Acceptance:
    """Pooled over all requests of a level. None where the server reports no speculation."""

    accept_length: float | None = None  # tokens per verify step (accepted drafts + 1)
    accept_rate: float | None = None  # accepted drafts / proposed drafts
    verify_steps: int = 0
    source: str = "none"  # "histogram", "verify_ct" (tokens / verify steps), or "none"
    histogram: list[int] = dataclasses.field(default_factory=list)  # padded to the block size
    # position_accepted[k-1]: share of verify steps whose draft at block position k was accepted.
    position_accepted: list[float] = dataclasses.field(default_factory=list)
    # position_conditional[k-1]: the same share among steps that accepted position k-1.
    position_conditional: list[float | None] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LevelStats:
    concurrency: int
    requests: int
    errors: int
    duration_s: float
    output_tokens: int
    output_throughput: float  # output tokens / s over the whole level
    ttft_ms: Percentiles
    tpot_ms: Percentiles  # (latency - TTFT) / (output tokens - 1), per request
    latency_ms: Percentiles
    acceptance: Acceptance
    load_average: float | None = None  # the client machine's 1-minute load when the level ended
    foreign_cpu: float | None = None  # other processes' share of the machine's CPU time over the level
    # Output tok/s of each repeat (fresh servers, interleaved with the other servers'), where the
    # level ran more than once; output_throughput is then their median and the other fields are
    # the median repeat's.
    repeats: list[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ServerRun:
    label: str
    url: str
    model: str
    algorithm: str | None = None  # SGLang's speculative_algorithm, None for plain decoding
    block_size: int | None = None  # speculative_num_draft_tokens
    draft_model: str | None = None
    notes: str = ""  # how the server was started (env switches), for the table's reader
    levels: list[LevelStats] = dataclasses.field(default_factory=list)

    def level(self, concurrency: int) -> LevelStats | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)


@dataclasses.dataclass
class BenchRun:
    dataset: str
    num_prompts: int
    max_tokens: int
    temperature: float
    concurrencies: list[int]
    baseline: str | None = None  # label of the ServerRun speedups are measured against
    created: str = ""
    machine: str = ""
    cpus: int = 0  # of the client machine; a load average above it means the timings were shared
    repeats: int = 1  # fresh servers per variant, interleaved (A B C A B C ...)
    servers: list[ServerRun] = dataclasses.field(default_factory=list)
    schema: str = SCHEMA

    def server(self, label: str) -> ServerRun | None:
        return next((s for s in self.servers if s.label == label), None)


def to_json(run: BenchRun) -> str:
    return json.dumps(dataclasses.asdict(run), indent=2)


def from_json(text: str) -> BenchRun:
    data = json.loads(text)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} results file (schema {data.get('schema')!r})")
    servers = [_server(s) for s in data.pop("servers")]
    return BenchRun(**data, servers=servers)


def _server(data: dict) -> ServerRun:
    levels = [_level(lv) for lv in data.pop("levels")]
    return ServerRun(**data, levels=levels)


def _level(data: dict) -> LevelStats:
    for key in ("ttft_ms", "tpot_ms", "latency_ms"):
        data[key] = Percentiles(**data[key])
    data["acceptance"] = Acceptance(**data["acceptance"])
    return LevelStats(**data)


def save(run: BenchRun, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json(run) + "\n")
    return path


def load(path: str | Path) -> BenchRun:
    return from_json(Path(path).read_text())
