"""Every repository path the docs name exists (README.md and docs/**/*.md).

A path is a token that starts at one of the repository's top folders (`python/...`, `tests/...`,
`docs/...`, `launch/...`), a markdown link to a local file, or a module-relative file name such
as `width/controller.py`, looked up under the doc's own folder, docs/, the plugin, the tools
(and their folders), the tests and the installed SGLang. URLs, globs and placeholders
(`<dataset>`, `{md,json}`, `$OUT`, `FILE.jsonl`) are not paths; files that commands write
(WRITTEN, each with the command) need not exist. A bare file name (`controller.py`) must name a
file somewhere in the repository or the installed SGLang.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = ("python/", "tests/", "docs/", "launch/", ".ci/")
# Module-relative names resolve under these: the repository, docs/, the two packages and their
# folders (`kernels/attention.py` in cpu/), python/ and tests/; then under the installed SGLang,
# whose files the docs name as `srt/...` or `kernels/...`.
PACKAGES = [ROOT / "python" / "dflash_sglang", ROOT / "python" / "dflash_sglang_tools"]
BASES = [ROOT, ROOT / "docs", *PACKAGES, ROOT / "python", ROOT / "tests"]
BASES += [folder for package in PACKAGES for folder in sorted(package.iterdir()) if folder.is_dir()]
# A token starting at one of the packages' folders is a path, with or without its `.py`
# (`step/drafting`, `cpu/kernels/`).
FOLDERS = {folder.name for package in PACKAGES for folder in package.iterdir() if folder.is_dir()} - {
    "__pycache__"
}
SGLANG_SPEC = importlib.util.find_spec("sglang")
SGLANG = [Path(p) for p in SGLANG_SPEC.submodule_search_locations] if SGLANG_SPEC else []
FILE = re.compile(r"\.(py|md|sh|json|jsonl|toml|png|txt|yaml|yml|safetensors)$")
TOKEN = re.compile(r"(?<![\w/.~-])((?:\.ci|[A-Za-z_][\w.-]*)(?:/[\w.*<>{},$-]*)+)")
BARE = re.compile(r"(?<![\w/.~-])([A-Za-z_][\w-]*\.(?:py|sh|md|json|jsonl|toml))(?![\w/])")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#([^)]*))?\)")
# Paths outside this repository that the docs name: SGLang's, z-lab's and other packages' files.
FOREIGN = ("sglang/", "sgl_kernel/", "sgl-kernel/", "transformers/", "torch/", "dflash/", "vllm/")
# Written by a command the doc gives, not kept in the repository.
WRITTEN = {
    "docs/bench/qwen3-8b": "the GPU bench commands in docs/benchmarks.md",
    "docs/bench/qwen3.5-27b": "the GPU bench commands in docs/benchmarks.md",
    "docs/bench/qwen3.6-35b-a3b": "the GPU bench commands in docs/benchmarks.md",
    "docs/gpu-check.md": "make gpu-check (its report on a machine with a GPU)",
}


def placeholder(token: str) -> bool:
    return any(mark in token for mark in "*<>{}$") or "..." in token


def resolve(doc: Path, token: str) -> Path | None:
    """The file or folder `token` names from `doc`, None where none exists."""
    token = token.rstrip(".,;:")
    candidates = [doc.parent / token] + [base / token for base in BASES] + [s / token for s in SGLANG]
    candidates += [path.with_name(path.name + ".py") for path in candidates if not FILE.search(token)]
    return next((path for path in candidates if path.exists()), None)


def links(doc: Path) -> list[tuple[str, str]]:
    """The local links of `doc`: (target, anchor), the anchor "" where none."""
    found = []
    for target, anchor in LINK.findall(doc.read_text()):
        if not re.match(r"[a-z]+:", target) and not placeholder(target):
            found.append((target, anchor))
    return found


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown page."""
    headings = re.findall(r"^#+ +(.+?) *$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def named_paths(doc: Path) -> set[str]:
    """The tokens of `doc` that name a repository path, its links' targets left out."""
    text = doc.read_text()
    found = set()
    for match in TOKEN.finditer(text):
        token = match.group(1).rstrip(".,;:")
        start = text[max(0, match.start() - 8) : match.start()]
        if "://" in start or placeholder(token) or token.startswith(FOREIGN):
            continue
        if token.startswith(TOP) or FILE.search(token) or token.split("/")[0] in FOLDERS:
            found.add(token)
    return found


def file_names(*roots: Path) -> set[str]:
    """The names of the files under roots, hidden folders and caches left out."""
    names = set()
    for root in roots:
        for _folder, subfolders, files in os.walk(root):
            subfolders[:] = [s for s in subfolders if not s.startswith(".") and s != "__pycache__"]
            names.update(files)
    return names


@pytest.fixture(scope="module")
def known_names() -> set[str]:
    return file_names(ROOT, *SGLANG)


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_file_name_a_doc_gives_exists(doc, known_names):
    names = {name for name in BARE.findall(doc.read_text()) if not name.split(".")[0].isupper()}
    missing = sorted(names - known_names)
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {', '.join(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc):
    missing = sorted(
        token
        for token in named_paths(doc)
        if resolve(doc, token) is None and token.rstrip("/") not in WRITTEN
    )
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {', '.join(missing)}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_link_of_a_doc_reaches_its_file_and_heading(doc):
    """A link is read relative to its page, as a markdown viewer reads it; an anchor must be one
    of the target page's headings."""
    broken = []
    for target, anchor in links(doc):
        page = doc.parent / target
        if not page.exists():
            broken.append(target)
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)} has broken links: {', '.join(broken)}"


def test_every_doc_the_code_names_exists():
    """The docs the code, the tests, the Makefile and the launch scripts point to."""
    sources = [ROOT / "Makefile", *(ROOT / "launch").glob("*.sh"), *sorted((ROOT / "tests").rglob("*.py"))]
    sources += [path for package in PACKAGES for path in sorted(package.rglob("*.py"))]
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources
        for name in re.findall(r"\bdocs/[\w/.-]*\w\.md\b", path.read_text())
        if not (ROOT / name).is_file() and name not in WRITTEN
    )
    assert not missing, f"docs named in code that do not exist: {', '.join(missing)}"


def test_the_matcher_finds_paths_and_skips_what_is_not_one(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text(
        "See `width/controller.py`, python/dflash_sglang/worker.py and [tree](tree.md#x).\n"
        "Not paths: https://github.com/sgl-project/sglang/blob/main/x.py, docs/bench/<name>.md,\n"
        "docs/bench/tiny-cpu_*.png, tok/s, sglang/srt/server_args.py, and/or.\n"
    )
    assert named_paths(doc) == {"width/controller.py", "python/dflash_sglang/worker.py"}
    assert links(doc) == [("tree.md", "x")]
    assert "tensor-parallelism-on-cpu---tp-size-2" in anchors(ROOT / "docs" / "benchmarks.md")
    assert BARE.findall("`controller.py`, cpu/gdn.py, FILE.jsonl and x.py/") == [
        "controller.py",
        "FILE.jsonl",
    ]
    assert resolve(ROOT / "docs" / "x.md", "width/controller.py") is not None
    assert resolve(ROOT / "docs" / "x.md", "cpu/pinning.py") is None
    assert "step/drafting" in named_paths(ROOT / "docs" / "architecture.md")
    assert resolve(ROOT / "docs" / "x.md", "step/drafting") and not resolve(
        ROOT / "docs" / "x.md", "step/nowhere"
    )
