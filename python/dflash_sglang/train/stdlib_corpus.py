"""Instruction/response pairs from the Python standard library's own source: offline, everywhere.

Every function with a docstring becomes one pair:

    instruction  Write a Python function `name(args)` that: <docstring summary>
    response     the function's source (decorators dropped, dedented)

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
    response = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno])).rstrip() + "\n"
    if len(response) > MAX_RESPONSE_CHARS or not response.isascii() or "\t" in response:
        return None
    return {
        "name": qualname,
        "instruction": f"Write a Python function `{signature_of(node)}` that: {summary}",
        "response": response,
    }


def is_held_out(pair: dict) -> bool:
    return zlib.crc32(f"{pair['module']}:{pair['name']}".encode()) % HELD_OUT_EVERY == 0


def build_corpus(root: Path | None = None) -> tuple[list[dict], list[dict]]:
    """(train, held_out) pairs, deduplicated by response, in a fixed order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    train, held_out = [], []
    for path in stdlib_files(root):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for pair in function_pairs(path.read_text(encoding="utf-8", errors="replace"), module):
            if pair["response"] in seen:
                continue
            seen.add(pair["response"])
            (held_out if is_held_out(pair) else train).append(pair)
    return train, held_out


def write_jsonl(pairs: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as file:
        for pair in pairs:
            file.write(json.dumps({"instruction": pair["instruction"], "response": pair["response"]}) + "\n")
