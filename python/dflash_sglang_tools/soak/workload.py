"""A soak workload: mixed requests, a share of them aborted at random points.

Kinds: greedy, sampled, logprobs, json_schema, regex, stop strings, long prompts. About
`abort_share` of them are aborted, half by the client closing its stream after a few chunks,
half through `/abort_request` a moment after they were sent. Everything is drawn from one seed,
so a run can be repeated.
"""

from __future__ import annotations

import dataclasses
import json
import random

KINDS = ("greedy", "sampled", "logprobs", "json_schema", "regex", "stop", "long_prompt")
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


@dataclasses.dataclass(frozen=True)
class SoakRequest:
    rid: str
    kind: str
    body: dict
    abort: str | None  # None, "disconnect" (after `abort_after` chunks) or "abort_request"
    abort_after: int

    @property
    def greedy(self) -> bool:
        return self.body["sampling_params"].get("temperature", 1.0) == 0


def make_workload(
    prompts: list[list[int]], count: int, seed: int = 0, abort_share: float = 0.2
) -> list[SoakRequest]:
    """`count` requests over the tokenized `prompts` (long prompts are several joined)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        ids = list(rng.choice(prompts))
        if kind == "long_prompt":
            while len(ids) < 600:
                ids += rng.choice(prompts)
        params = {"max_new_tokens": rng.randint(8, 48), "temperature": 0.0}
        extra = {}
        if kind == "sampled":
            params.update(temperature=1.0, top_p=0.9)
        elif kind == "logprobs":
            extra = {"return_logprob": True, "top_logprobs_num": 2}
        elif kind == "json_schema":
            params["json_schema"] = json.dumps(SCHEMA)
        elif kind == "regex":
            params["regex"] = "[a-z ]{4,40}"
        elif kind == "stop":
            params["stop"] = [" ", "\n"]
        abort = None
        if rng.random() < abort_share:
            abort = rng.choice(("disconnect", "abort_request"))
        rid = f"soak-{seed}-{i}"
        body = {"rid": rid, "input_ids": ids, "sampling_params": params, **extra}
        out.append(SoakRequest(rid, kind, body, abort, rng.randint(1, 4)))
    return out
