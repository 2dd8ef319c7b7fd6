"""The packages' layout keeps its promises (docs/architecture.md): the plugin (dflash_sglang) with a
short root, folders that import only the folders below them, no import circles, an engine-free
core, and every public entry point the README names; its tools (dflash_sglang_tools) apart, which
import the plugin and are never imported by it."""

import ast
import runpy
import sys
from pathlib import Path

import pytest

PYTHON = Path(__file__).resolve().parents[1] / "python"
PACKAGE = PYTHON / "dflash_sglang"  # the plugin: what a server loads
TOOLS_PACKAGE = PYTHON / "dflash_sglang_tools"

# Bottom to top: a module may import its own folder and the folders before it, never one after.
LAYERS = [
    "errors", "environment", "runtime", "cpu", "sampling", "tree", "drafter", "width", "step", "admission",
    "settings", "worker", "overlap", "plugin",  # the startup decisions, the step and the entry point
]  # fmt: skip
TOOL_LAYERS = ["testing", "bench", "train", "soak", "gpu_check", "demo", "tree_sim", "step_branches"]
# The engine-free definition: plain PyTorch and transformers, no SGLang.
ENGINE_FREE = [
    "errors", "environment", "runtime.visibility", "drafter.config", "drafter.model",
    "drafter.reference", "sampling.accept", "drafter.context", "drafter.conv", "drafter.domino",
    "drafter.generations", "drafter.laguna",
    "drafter.selector", "drafter.variants", "sampling.block_verify", "sampling.distribution",
    "sampling.target_law", "tree.build", "width.request_lengths", "width.ranking", "width.step_cost",
    "runtime", "drafter", "sampling", "tree", "width",  # the folders' __init__ run first
]  # fmt: skip


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module of `root`'s package this file imports, anywhere in it (local imports included),
    and the packages whose `__init__` Python runs on the way."""
    name, top = module_name(path, root), root.name
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == top:
                target = node.module.removeprefix(top).lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import module` names a module
                sub = f"{target}.{alias.name}" if target else alias.name
                found.add(sub if known(sub, root) else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    found.add(alias.name.removeprefix(top).lstrip("."))
    # Importing a.b.c runs a/__init__ and a/b/__init__ first: those are imported too, except this
    # module's own packages (already imported by the time it runs).
    parts = name.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    found |= {".".join(t.split(".")[:i]) for t in found for i in range(1, t.count(".") + 1)} - own
    return {target for target in found if target and target != name}


def known(name: str, root: Path = PACKAGE) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}
TOOL_MODULES = {module_name(p, TOOLS_PACKAGE): p for p in sorted(TOOLS_PACKAGE.rglob("*.py"))}
TOOL_GRAPH = {name: imports_of(path, TOOLS_PACKAGE) for name, path in TOOL_MODULES.items()}


def layer(name: str, layers: list = LAYERS) -> int:
    return layers.index(name.split(".")[0])


def test_the_root_holds_at_most_twelve_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= 12, root


@pytest.mark.parametrize("root,layers", [(PACKAGE, LAYERS), (TOOLS_PACKAGE, TOOL_LAYERS)])
def test_every_folder_says_what_it_is_for(root, layers):
    for folder in sorted(p for p in [root, *root.iterdir()] if p.is_dir() and (p / "__init__.py").exists()):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc and len(doc) > 80, f"{folder.name}/__init__.py needs a paragraph on what it is for"
        assert folder == root or folder.name in layers, f"{folder.name}/ has no place in the layers"


@pytest.mark.parametrize("root", [PACKAGE, TOOLS_PACKAGE])
def test_every_folder_names_each_of_its_modules(root):
    """A reader opening a folder's __init__ finds every file in it (and the root every folder)."""
    missing = []
    for folder in [root, *(p for p in root.iterdir() if (p / "__init__.py").exists())]:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        names = [p.name for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        names += [p.name + "/" for p in folder.iterdir() if (p / "__init__.py").exists()]
        missing += [f"{folder.name}/{name}" for name in sorted(names) if name not in doc]
    assert not missing, missing


def test_no_two_modules_share_a_name():
    """A name says its folder's concern: no file name repeats across folders (or a folder's name)."""
    seen: dict[str, list[str]] = {}
    for root in (PACKAGE, TOOLS_PACKAGE):
        for path in root.rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py"):
                seen.setdefault(path.stem, []).append(str(path.relative_to(PYTHON)))
        for folder in root.iterdir():
            if (folder / "__init__.py").exists():
                seen.setdefault(folder.name, []).append(str(folder.relative_to(PYTHON)) + "/")
    assert not {name: where for name, where in seen.items() if len(where) > 1}


@pytest.mark.parametrize("graph,layers", [(GRAPH, LAYERS), (TOOL_GRAPH, TOOL_LAYERS)])
def test_imports_run_downward_only(graph, layers):
    upward = [
        f"{name} imports {target}"
        for name, targets in graph.items()
        if name
        for target in targets
        if target and layer(target, layers) > layer(name, layers)
    ]
    assert not upward, "\n".join(upward)


def test_the_plugin_never_imports_its_tools():
    """A server loads the plugin alone: nothing in it may reach dflash_sglang_tools."""
    reach = [
        f"{name}: line {node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            mod.split(".")[0] == TOOLS_PACKAGE.name
            for mod in ([node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
            if mod
        )
    ]
    assert not reach, reach


def test_no_import_circles():
    state, stack, circles = {}, [], []

    def visit(name):
        state[name] = "open"
        stack.append(name)
        for target in sorted(GRAPH.get(name, ())):
            target = target if target in GRAPH else target.rsplit(".", 1)[0]
            if state.get(target) == "open":
                circles.append(stack[stack.index(target) :] + [target])
            elif target in GRAPH and target not in state:
                visit(target)
        stack.pop()
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


@pytest.mark.parametrize("name", ENGINE_FREE)
def test_the_engine_free_core_never_imports_sglang(name):
    tree = ast.parse(MODULES[name].read_text())
    engine = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            mod.split(".")[0] in ("sglang", "sgl_kernel", "flashinfer")
            for mod in ([node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])
            if mod
        )
    ]
    assert not engine, f"{name} imports SGLang at lines {engine}"
    for target in GRAPH[name]:
        assert target in ENGINE_FREE or target.rsplit(".", 1)[0] in ENGINE_FREE, f"{name} imports {target}"


def test_the_public_entry_points_the_readme_names():
    from dflash_sglang.drafter.model import DFlashDraftModel
    from dflash_sglang.drafter.reference import dflash_generate, spec_generate
    from dflash_sglang.overlap import DFlashOverlapWorker
    from dflash_sglang.plugin import register
    from dflash_sglang.worker import DFlashWorker

    assert callable(DFlashDraftModel.from_pretrained) and callable(DFlashDraftModel.spec_generate)
    assert callable(register) and callable(dflash_generate) and callable(spec_generate)
    assert issubclass(DFlashOverlapWorker, DFlashWorker)


TOOLS = ["train", "train.tiny_pair", "bench", "bench.suite", "bench.adaptive", "bench.step_profile", "soak",
         "gpu_check", "tree_sim", "demo", "testing.tiny", "step_branches"]  # fmt: skip


@pytest.mark.parametrize("tool", TOOLS)
def test_each_tool_runs_as_a_module(tool, capsys, monkeypatch):
    """`python -m dflash_sglang_tools.<tool> --help` prints its usage (the README's commands)."""
    monkeypatch.setattr(sys, "argv", [tool, "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module(f"dflash_sglang_tools.{tool}", run_name="__main__", alter_sys=True)
    assert done.value.code == 0
    assert "usage" in capsys.readouterr().out.lower()
