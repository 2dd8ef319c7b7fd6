"""Every `DFLASH_SGLANG_*` environment switch the plugin and its tools read: its name, type,
default and what it does, and the one parser they all go through.

A switch reads `os.environ` each time it is asked (tests and tools set them per server), the same
words everywhere: on is 1 / true / yes / on, off is 0 / false / no / off, in any case; unset, empty
or `default` is the switch's default. Anything else raises DFlashConfigError naming the switch and
the value, so a misspelt switch stops a server at startup instead of meaning "off". Checks that
need the server (a width within the block, a switch the path cannot take) stay where they are
decided; this module holds what the value is. docs/switches.md carries `markdown()`'s table
(tests/test_switches.py keeps the two equal and every module's reads here).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import DFlashConfigError

ON, OFF, UNSET = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("", "default")


@dataclass(frozen=True)
class Switch:
    name: str
    kind: str  # "on/off", "choice", "integers", "rates" or "path"
    default: bool | str | tuple | None  # None for an on/off switch: the server decides
    doc: str
    choices: tuple[str, ...] = ()  # a "choice" switch's words

    def value(self):
        """The switch's value now: the parsed environment, or the default where unset."""
        return self.parse(os.environ.get(self.name, ""))

    def parse(self, text: str):
        text = text.strip()
        if text.lower() in UNSET:
            return self.default
        try:
            return PARSERS[self.kind](self, text)
        except ValueError:
            raise DFlashConfigError(f"{self.name}={text!r}: expected {self.expected}") from None

    @property
    def expected(self) -> str:
        return {
            "on/off": "1 / true / yes / on or 0 / false / no / off",
            "choice": " or ".join(repr(c) for c in self.choices),
            "integers": "comma-separated integers",
            "rates": "rates in [0, 1], comma-separated",
            "path": "a path",  # never raised: a path takes any text
        }[self.kind]


def on_off(switch: Switch, text: str) -> bool:
    if text.lower() not in ON + OFF:
        raise ValueError(text)
    return text.lower() in ON


def choice(switch: Switch, text: str) -> str:
    if text.lower() not in switch.choices:
        raise ValueError(text)
    return text.lower()


def integers(switch: Switch, text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def rates(switch: Switch, text: str) -> tuple[float, ...]:
    values = tuple(float(part) for part in text.split(","))
    if not all(0.0 <= r <= 1.0 for r in values):  # NaN fails this too
        raise ValueError(text)
    return values


def path(switch: Switch, text: str) -> str:
    return text


PARSERS = {"on/off": on_off, "choice": choice, "integers": integers, "rates": rates, "path": path}

# ---- the plugin and its worker ----------------------------------------------------------------
DISABLE = Switch("DFLASH_SGLANG_DISABLE", "on/off", False, "the plugin does nothing")
WORKER = Switch(
    "DFLASH_SGLANG_WORKER", "choice", "dflash_sglang",
    "`builtin`: SGLang's built-in DFLASH worker serves, with our CPU layer (side-by-side comparisons)",
    choices=("dflash_sglang", "builtin"),
)  # fmt: skip
FORK_SUBPROCESSES = Switch(
    "DFLASH_SGLANG_FORK_SUBPROCESSES", "on/off", False,
    "a `--device cpu` server forks its scheduler and detokenizer instead of spawning them",
)  # fmt: skip
CHECK_HOST_SYNC = Switch(
    "DFLASH_SGLANG_CHECK_HOST_SYNC", "on/off", False,
    "debugging: fail any step that reads device data on the host (a GPU host sync)",
)  # fmt: skip
DRAFTER_STREAM = Switch(
    "DFLASH_SGLANG_DRAFTER_STREAM", "on/off", True,
    "the overlap worker drafts on its own CUDA stream; off keeps the drafter on the target's",
)  # fmt: skip
# ---- the verify width ---------------------------------------------------------------------------
ADAPTIVE_WIDTH = Switch(
    "DFLASH_SGLANG_ADAPTIVE_WIDTH", "on/off", None,
    "each step verifies as much of the block (or tree) as pays; unset: on where no verify has a graph",
)  # fmt: skip
REQUEST_LENGTHS = Switch(
    "DFLASH_SGLANG_REQUEST_LENGTHS", "on/off", None,
    "with the adaptive width, each request verifies its own length; unset: on for chains that can",
)  # fmt: skip
PARTIAL_DRAFTER = Switch(
    "DFLASH_SGLANG_PARTIAL_DRAFTER", "on/off", False,
    "with per-request lengths, a step drafts only the requests that verify drafts",
)  # fmt: skip
VERIFY_WIDTHS = Switch(
    "DFLASH_SGLANG_VERIFY_WIDTHS", "integers", (),
    "testing: every step's width from this cycle (`8,1,4`), each in 1..the block (or the tree's nodes)",
)  # fmt: skip
FORCED_REQUEST_LENGTHS = Switch(
    "DFLASH_SGLANG_FORCED_REQUEST_LENGTHS", "integers", (),
    "testing: request i of step s verifies cycle[(s + i) % len] positions (`8,1,4`)",
)  # fmt: skip
SIMULATE_ACCEPTANCE = Switch(
    "DFLASH_SGLANG_SIMULATE_ACCEPTANCE", "rates", (),
    "benchmarking only: drafts accepted at these per-position rates (`0.85`, `0.95,0.9`), not the model's",
)  # fmt: skip
# ---- drafts and their verification --------------------------------------------------------------
SAMPLED_DRAFTS = Switch(
    "DFLASH_SGLANG_SAMPLED_DRAFTS", "on/off", True,
    "at temperature > 0 drafts are drawn from the request's law over the drafter's; off: point drafts",
)  # fmt: skip
TRITON_ROW_LAW = Switch(
    "DFLASH_SGLANG_TRITON_ROW_LAW", "on/off", True,
    "on CUDA the T > 0 verify's law, acceptance and final draw run Triton kernels; off: the torch passes",
)  # fmt: skip
REPLAY_SSM = Switch(
    "DFLASH_SGLANG_REPLAY_SSM", "on/off", None,
    "hybrid Gated DeltaNet chains verify through SGLang's ReplaySSM ring, not a state per position; "
    "unset: the ring wherever it can serve (on CPU a tree keeps a state per node)",
)  # fmt: skip
STEP_RECORD = Switch(
    "DFLASH_SGLANG_STEP_RECORD", "path", "",
    "testing: each TP rank appends what every decode step handed the target to `<path>.tp<rank>.jsonl`",
)  # fmt: skip

SWITCHES = (
    DISABLE, WORKER, FORK_SUBPROCESSES, CHECK_HOST_SYNC, DRAFTER_STREAM, ADAPTIVE_WIDTH,
    REQUEST_LENGTHS, PARTIAL_DRAFTER, VERIFY_WIDTHS, FORCED_REQUEST_LENGTHS, SIMULATE_ACCEPTANCE,
    SAMPLED_DRAFTS, TRITON_ROW_LAW, REPLAY_SSM, STEP_RECORD,
)  # fmt: skip


KIND_WORDS = {
    "on/off": "on / off",
    "integers": "integers, comma-separated",
    "rates": "rates in [0, 1], comma-separated",
    "path": "a path",
}


def default_words(switch: Switch) -> str:
    if switch.default is None:
        return "decided at startup (the log says)"
    if isinstance(switch.default, bool):
        return "on" if switch.default else "off"
    return f"`{switch.default}`" if switch.default else "none"


def markdown() -> str:
    """docs/switches.md's table of the switches, one row each."""
    rows = ["| switch | type | default | what it does |", "|---|---|---|---|"]
    for s in SWITCHES:
        kind = " / ".join(f"`{c}`" for c in s.choices) if s.choices else KIND_WORDS[s.kind]
        rows.append(f"| `{s.name}` | {kind} | {default_words(s)} | {s.doc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m dflash_sglang.environment: the table for docs/switches.md
    print(markdown(), end="")
