"""Instruction/response pairs from the Python standard library's own source: offline, everywhere.

Every function with a docstring becomes one pair, in one of three phrasings (by a hash of its
name, so a user's short request and a specification both appear, and code is read as well as
written):

    specified  Write a Python function `name(args)` that: <docstring summary>  ->  the source
    short      Write a <name in words> in Python.                              ->  the source
    reading    Explain what this Python function does: <the code>              ->  the summary

The source is the function's, decorators dropped, dedented; the code a reading prompt shows is
that source without its docstring (which would hold the answer). Answers keep their docstrings:
a drafter predicts a docstring's frame well, and a target trained without them (code alone)
was harder to draft for (docs/journal/benchmarks.md, the 2026-11-25 retrain).

Files are read in sorted order and a pair goes to the held-out split by a hash of its module and
qualified name, so the corpus and its split are the same on every run of one Python version.
"""

from __future__ import annotations

import ast
import json
import re
import sysconfig
import textwrap
import zlib
from pathlib import Path

# Tests, GUIs and vendored or generated code read unlike ordinary library code.
SKIPPED_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "site-packages",
                "ensurepip", "pydoc_data", "encodings", "__pycache__"}  # fmt: skip
MAX_RESPONSE_CHARS = 700
MAX_SUMMARY_CHARS = 160
HELD_OUT_EVERY = 64  # about 1.5% of the pairs
# Out of every 10 functions: 4 specified, 4 short, 2 read (by a second hash of the name).
PHRASINGS = ("specified",) * 4 + ("short",) * 4 + ("reading",) * 2
SHORT_TEMPLATES = ("Write a {} in Python.", "Write a {} function in Python.", "Implement {} in Python.",
                   "Write Python code to {}.")  # fmt: skip


def stdlib_files(root: Path | None = None) -> list[Path]:
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(
        path
        for path in root.rglob("*.py")
        if not SKIPPED_DIRS.intersection(dirs := path.relative_to(root).parts[:-1])
        and not any(d.startswith("config-") for d in dirs)  # the build's Makefile-generated config
        and not path.name.startswith(("test_", "_pydecimal", "_pyio"))
    )


def summary_of(docstring: str) -> str:
    """The docstring's first paragraph on one line."""
    paragraph = docstring.strip().split("\n\n")[0]
    return re.sub(r"\s+", " ", paragraph).strip()


def signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = ast.unparse(node.args)
    return f"{node.name}({args})"


def function_pairs(source: str, module: str) -> list[dict]:
    """One pair per (async) function with a docstring, methods included, in source order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    lines = source.splitlines(keepends=True)
    pairs = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                pair = _pair(child, lines, f"{prefix}{child.name}")
                if pair is not None:
                    pairs.append({"module": module, **pair})

    visit(tree, "")
    return pairs


def _pair(node, lines: list[str], qualname: str) -> dict | None:
    docstring = ast.get_docstring(node)
    if not docstring:
        return None
    summary = summary_of(docstring)
    if not summary or len(summary) > MAX_SUMMARY_CHARS or not summary.isascii():
        return None
    source = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])).rstrip() + "\n"
    code = code_without_docstring(node, lines)
    if code is None or len(source) > MAX_RESPONSE_CHARS or not source.isascii() or "\t" in source:
        return None
    signature = signature_of(node)
    instruction, response = phrased(qualname, signature, summary, code, source)
    return {"name": qualname, "instruction": instruction, "response": response,
            "signature": signature, "summary": summary, "code": code, "source": source}  # fmt: skip


def code_without_docstring(node, lines: list[str]) -> str | None:
    """The function's source, dedented, without the docstring's lines (None: nothing else)."""
    doc = node.body[0]
    if len(node.body) == 1 or doc.lineno <= node.lineno:  # docstring only, or on the def line
        return None
    body = lines[doc.end_lineno : node.end_lineno]
    while body and not body[0].strip():  # the blank line that followed the docstring
        body = body[1:]
    kept = lines[node.lineno - 1 : doc.lineno - 1] + body
    return textwrap.dedent("".join(kept)).rstrip() + "\n"


def name_in_words(qualname: str) -> str:
    """`Parser._parse_args` -> "parse args"; `readLine` -> "read line"."""
    name = qualname.rsplit(".", 1)[-1].strip("_")
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return " ".join(part.lower() for part in name.split("_") if part)


def phrased(
    qualname: str, signature: str, summary: str, code: str, source: str, phrasing: str | None = None
) -> tuple[str, str]:
    """(instruction, response) in the function's own phrasing (by hash), or in `phrasing`."""
    choice = zlib.crc32(f"phrasing:{qualname}".encode())
    phrasing = phrasing or PHRASINGS[choice % len(PHRASINGS)]
    words = name_in_words(qualname)
    if phrasing == "short" and words and not qualname.rsplit(".", 1)[-1].startswith("__"):
        template = SHORT_TEMPLATES[(choice // len(PHRASINGS)) % len(SHORT_TEMPLATES)]
        return template.format(words), source
    if phrasing == "reading":
        return f"Explain what this Python function does:\n\n{code}", summary
    return f"Write a Python function `{signature}` that: {summary}", source


def every_instruction(pair: dict) -> list[str]:
    """The pair's function asked in each phrasing (the short one only where its name has words):
    prompts for the target's own responses, the drafter's data, in every way it is asked."""
    parts = (pair["name"], pair["signature"], pair["summary"], pair["code"], pair["source"])
    return list(dict.fromkeys(phrased(*parts, phrasing)[0] for phrasing in dict.fromkeys(PHRASINGS)))


def is_held_out(pair: dict) -> bool:
    return zlib.crc32(f"{pair['module']}:{pair['name']}".encode()) % HELD_OUT_EVERY == 0


def build_corpus(root: Path | None = None) -> tuple[list[dict], list[dict]]:
    """(train, held_out) pairs, deduplicated by code, in a fixed order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    train, held_out = [], []
    for path in stdlib_files(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for pair in function_pairs(path.read_text(encoding="utf-8", errors="replace"), module):
            if pair["code"] in seen:
                continue
            seen.add(pair["code"])
            (held_out if is_held_out(pair) else train).append(pair)
    return train, held_out


def write_jsonl(pairs: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as file:
        for pair in pairs:
            file.write(json.dumps({"instruction": pair["instruction"], "response": pair["response"]}) + "\n")
