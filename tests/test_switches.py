"""The switches table (python/dflash_sglang/environment.py): one parser, the same words for on and
off everywhere, a bad value named; docs/switches.md carries the table as it is; no module reads a
`DFLASH_SGLANG_*` variable but through it, and no file names a switch the table lacks."""

import ast
import re
from pathlib import Path

import pytest

from dflash_sglang import environment
from dflash_sglang.environment import SWITCHES, Switch
from dflash_sglang.errors import DFlashConfigError

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / "python"
DOCS = ROOT / "docs" / "switches.md"
NAMES = {s.name for s in SWITCHES}
MENTION = re.compile(r"DFLASH_SGLANG_[A-Z0-9_]*[A-Z0-9]")
BEGIN, END = "<!-- switches table: begin -->", "<!-- switches table: end -->"

FLAGS = [s for s in SWITCHES if s.kind == "on/off"]


@pytest.mark.parametrize("switch", FLAGS, ids=lambda s: s.name)
def test_every_flag_takes_the_same_words(monkeypatch, switch):
    for text in ("1", "true", "YES", " on ", "True"):
        monkeypatch.setenv(switch.name, text)
        assert switch.value() is True, text
    for text in ("0", "false", "No", " off ", "FALSE"):
        monkeypatch.setenv(switch.name, text)
        assert switch.value() is False, text
    for text in ("", "  ", "default", "Default"):  # unset, as SGLangServer's env {name: ""} means
        monkeypatch.setenv(switch.name, text)
        assert switch.value() is switch.default, text
    monkeypatch.delenv(switch.name)
    assert switch.value() is switch.default


@pytest.mark.parametrize("switch", [s for s in SWITCHES if s.kind != "path"], ids=lambda s: s.name)
def test_a_bad_value_fails_naming_the_switch_and_the_value(monkeypatch, switch):
    monkeypatch.setenv(switch.name, " maybe ")
    with pytest.raises(DFlashConfigError, match=rf"^{switch.name}='maybe': expected "):
        switch.value()


def test_the_typed_switches_parse_their_values(monkeypatch):
    assert environment.WORKER.parse(" Builtin ") == "builtin"
    assert environment.WORKER.parse("") == "dflash_sglang"
    assert environment.VERIFY_WIDTHS.parse("8, 1,4") == (8, 1, 4)
    assert environment.FORCED_REQUEST_LENGTHS.parse("") == ()
    assert environment.SIMULATE_ACCEPTANCE.parse("0.95,0.9,1") == (0.95, 0.9, 1.0)
    assert environment.STEP_RECORD.parse(" /tmp/steps ") == "/tmp/steps"
    for switch, text in [(environment.VERIFY_WIDTHS, "4,,8"), (environment.VERIFY_WIDTHS, "4.5"),
                         (environment.SIMULATE_ACCEPTANCE, "1.5"), (environment.SIMULATE_ACCEPTANCE, "nan"),
                         (environment.SIMULATE_ACCEPTANCE, "0.9,x")]:  # fmt: skip
        with pytest.raises(DFlashConfigError, match=switch.name):
            switch.parse(text)


def test_a_switch_is_read_when_asked_not_at_import(monkeypatch):
    monkeypatch.setenv(environment.CHECK_HOST_SYNC.name, "1")
    assert environment.CHECK_HOST_SYNC.value()
    monkeypatch.setenv(environment.CHECK_HOST_SYNC.name, "0")
    assert not environment.CHECK_HOST_SYNC.value()


def test_every_switch_has_a_name_a_kind_a_default_and_a_line_of_doc():
    assert len(NAMES) == len(SWITCHES)
    for s in SWITCHES:
        assert isinstance(s, Switch) and MENTION.fullmatch(s.name), s
        assert s.kind in environment.PARSERS and s.doc and "\n" not in s.doc, s
        assert s.parse("") == s.default, s
        assert (s.kind == "choice") == bool(s.choices) and (not s.choices or s.default in s.choices), s


def documented_table() -> str:
    text = DOCS.read_text()
    assert BEGIN in text and END in text, f"docs/switches.md needs the table between {BEGIN} and {END}"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def test_docs_carry_the_table_as_it_is():
    """Regenerate with `python -m dflash_sglang.environment` and paste between the markers."""
    assert documented_table() == environment.markdown()
    for s in SWITCHES:  # and each row says its default
        assert f"| `{s.name}` | " in documented_table() and environment.default_words(s) in documented_table()


def test_every_switch_a_file_names_is_in_the_table():
    """A misspelt or retired switch in code, tests or docs (a write for a child server included)."""
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]
    files += [
        *sorted(PYTHON.rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.py")),
        *(ROOT / "launch").glob("*"),
    ]
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        if path.is_file()
        for name in MENTION.findall(path.read_text(errors="replace"))
        if name not in NAMES
    }
    assert not unknown, sorted(unknown)


READS = ("get", "pop", "setdefault")  # os.environ's methods that read a variable


def env_reads(tree: ast.AST):
    """Each read of the environment in a module: os.environ.get(x), os.getenv(x), os.environ[x],
    `x in os.environ`, with x's node. Copies ({**os.environ}) and writes are not reads."""

    def is_environ(node):
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in READS and is_environ(f.value):
                yield node.args[0]
            elif (isinstance(f, ast.Attribute) and f.attr == "getenv") or (
                isinstance(f, ast.Name) and f.id == "getenv"
            ):
                yield node.args[0]
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            yield node.slice
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            yield node.left


def names_read(tree: ast.AST, arg: ast.AST) -> list[str] | None:
    """The variable names a read can take: a string, a module constant (a string or a tuple of
    them), or a loop variable over such a constant; None where it cannot be told."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
    loops = {
        node.target.id: node.iter
        for node in ast.walk(tree)
        if isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name)
    }

    def resolve(node, depth=0):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List):
            found = [resolve(e, depth + 1) for e in node.elts]
            return None if None in found else [n for names in found for n in names]
        if isinstance(node, ast.Name) and depth < 4:
            source = constants.get(node.id) or loops.get(node.id)
            return resolve(source, depth + 1) if source is not None else None
        return None

    return resolve(arg)


def test_no_module_reads_a_switch_but_through_the_table():
    bad = []
    for path in sorted(PYTHON.rglob("*.py")):
        if path == PYTHON / "dflash_sglang" / "environment.py":
            continue
        tree = ast.parse(path.read_text())
        for arg in env_reads(tree):
            names = names_read(tree, arg)
            where = f"{path.relative_to(PYTHON)}:{arg.lineno}"
            if names is None:
                bad.append(f"{where}: reads a variable it does not name (name it, or go through the table)")
            bad += [f"{where}: reads {n}" for n in names or () if n.startswith("DFLASH_SGLANG_")]
    assert not bad, "\n".join(bad)


def test_the_scan_sees_each_way_of_reading():
    """Reads, each named (P_ stands for the prefix, so the mention scan above passes this file);
    a copy for a child and a write are not reads."""
    code = """
import os
from os import environ, getenv
FLAG = "P_X"
BOTH = ("SGLANG_A", "P_Y")
a = os.environ.get("P_A", "")
b = os.getenv(FLAG)
c = environ["P_C"]
d = "P_D" in os.environ
e = any(os.environ.get(flag) for flag in BOTH)
f = getenv(some_call())
env = {**os.environ, "P_WRITE": "1"}
os.environ["P_WRITE"] = "1"
"""
    tree = ast.parse(code.replace("P_", "DFLASH_SGLANG_"))
    read = [names_read(tree, arg) for arg in env_reads(tree)]
    named = [["P_A"], ["P_X"], ["P_C"], ["P_D"], ["SGLANG_A", "P_Y"], None]
    assert sorted(map(str, read)) == sorted(str(n).replace("P_", "DFLASH_SGLANG_") for n in named)
