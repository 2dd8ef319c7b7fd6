"""How many branches a reader holds on the decode step's path (issue 59's "step's path counted").

    python -m dflash_sglang_tools.step_branches [--root python/dflash_sglang] [--list]

From `DFlashWorker.forward_batch_generation`, follow every call the source resolves to the
plugin's own code: `self.method(...)`, a phase held in `self.name = Class(...)` (its `__call__`
and methods), a class or function imported from the package, `module.function(...)` for an
imported module of the package. Count the branches in every function reached: `if`/`elif`,
conditional expressions, `and`/`or` chains and comprehension filters, `match` cases, `while`.
The decode step only: prefill and idle (their own paths) are left out. A static count: a call
made through a value the source cannot type (a callback, a dict of rules) is not followed, and the
listing says which were not.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path

ENTRY = ("worker", "DFlashWorker", "forward_batch_generation")
SKIP = {"prefill", "idle", "count_first_tokens"}  # the prefill's and idle step's own paths


@dataclass
class Module:
    name: str
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> "module:attr" or "module"
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)


def load(root: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = Module(name, ast.parse(path.read_text()))
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in module.tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = ".".join(
                    package[: len(package) - node.level + 1] + ([node.module] if node.module else [])
                )
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{base}:{alias.name}".lstrip(".")
            elif isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
        modules[name] = module
    return modules


def branches(function: ast.AST) -> int:
    count = 0
    for node in ast.walk(function):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            count += len(node.ifs)
        elif isinstance(node, ast.Match):
            count += len(node.cases)
    return count


class Walker:
    def __init__(self, modules: dict[str, Module]):
        self.modules, self.seen, self.unresolved = modules, {}, set()

    def resolve(self, ref: str):
        """'module:Name' -> (module, class or function node), following re-exports."""
        module_name, _, attr = ref.partition(":")
        module = self.modules.get(module_name)
        if module is None:
            return (
                (self.modules[f"{module_name}.{attr}"], None)
                if f"{module_name}.{attr}" in self.modules
                else None
            )
        if attr in module.classes or attr in module.functions:
            return module, module.classes.get(attr) or module.functions.get(attr)
        if attr in module.imports:
            return self.resolve(module.imports[attr])
        return None

    def method(self, module: Module, cls: ast.ClassDef, name: str):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        for base in cls.bases:  # a base class of the package
            if isinstance(base, ast.Name) and base.id in module.classes:
                found = self.method(module, module.classes[base.id], name)
                if found is not None:
                    return found
        return None

    def attribute_classes(self, module: Module, cls: ast.ClassDef) -> dict[str, tuple[Module, ast.ClassDef]]:
        """self.x = Class(...) (anywhere in the class): x's class, where the package defines it."""
        found, typed = {}, {}
        for node in ast.walk(cls):  # parameters' annotations: self.x = x where x: Class
            if isinstance(node, ast.FunctionDef):
                for arg in node.args.args + node.args.kwonlyargs:
                    hit = arg.annotation is not None and self.class_of_annotation(module, arg.annotation)
                    if hit:
                        typed[arg.arg] = hit
        for node in ast.walk(cls):
            if isinstance(node, ast.AnnAssign) and self_attribute(node.target):
                hit = self.class_of_annotation(module, node.annotation)
                if hit:
                    found[node.target.attr] = hit
            if not isinstance(node, ast.Assign):
                continue
            targets = [t for t in node.targets if self_attribute(t)]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if len(targets) == 1 and isinstance(targets[0], ast.Tuple):
                targets = targets[0].elts
            elif len(values) != len(targets):
                values = [node.value] * len(targets)
            for target, value in zip(targets, values, strict=False):
                hit = self.class_of_value(module, cls, value, typed)
                if hit and self_attribute(target):
                    found[target.attr] = hit
        return found

    def class_of_value(self, module, cls, value, typed):
        if isinstance(value, ast.Name):
            return typed.get(value.id)
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            method = self.method(module, cls, func.attr)  # self.x = self.build_x(): its return type
            return (
                method is not None
                and method.returns is not None
                and self.class_of_annotation(module, method.returns)
            )
        return self.class_of_call(module, func)

    def class_of_annotation(self, module, annotation):
        names = [n for n in ast.walk(annotation) if isinstance(n, ast.Name)]
        for name in names:  # `X | None`: X
            hit = self.class_of_call(module, name)
            if hit:
                return hit
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return self.class_of_annotation(module, ast.parse(annotation.value, mode="eval").body)
        return None

    def class_of_call(self, module: Module, func: ast.expr):
        if isinstance(func, ast.Name):
            if func.id in module.classes:
                return module, module.classes[func.id]
            if func.id in module.imports:
                hit = self.resolve(module.imports[func.id])
                if hit and isinstance(hit[1], ast.ClassDef):
                    return hit
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):  # Class.create(...)
            inner = self.class_of_call(module, func.value)
            if inner:
                return inner
        return None

    def visit(self, module: Module, cls: ast.ClassDef | None, function: ast.FunctionDef) -> None:
        key = f"{module.name}:{cls.name + '.' if cls else ''}{function.name}"
        if key in self.seen:
            return
        self.seen[key] = branches(function)
        attrs = self.attribute_classes(module, cls) if cls else {}
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                self.follow(module, cls, attrs, node.func)

    def follow(self, module, cls, attrs, func) -> None:
        if isinstance(func, ast.Name):  # a function or class of the package
            target = module.functions.get(func.id) and (module, module.functions[func.id])
            target = target or (func.id in module.imports and self.resolve(module.imports[func.id]))
            if not target:
                return
            target_module, node = target
            if isinstance(node, ast.FunctionDef):
                self.visit(target_module, None, node)
            elif isinstance(node, ast.ClassDef) and self.method(target_module, node, "__init__") is None:
                pass
            return
        if not isinstance(func, ast.Attribute):
            return
        owner = func.value
        if isinstance(owner, ast.Name) and owner.id == "self" and cls is not None:
            if func.attr in SKIP:
                return
            found = self.method(module, cls, func.attr)
            if found is not None:
                self.visit(module, cls, found)
            elif func.attr in attrs:  # a phase called: its __call__
                self.call_method(*attrs[func.attr], "__call__")
            return
        if (
            isinstance(owner, ast.Attribute)
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "self"
        ):
            if owner.attr in attrs:  # self.phase.method(...)
                self.call_method(*attrs[owner.attr], func.attr)
            else:
                self.unresolved.add(f"self.{owner.attr}.{func.attr}")
            return
        if isinstance(owner, ast.Name) and owner.id in module.imports:  # module.function(...)
            hit = self.resolve(module.imports[owner.id])
            if hit and hit[1] is None:
                target_module = hit[0]
                node = target_module.functions.get(func.attr)
                if node is not None:
                    self.visit(target_module, None, node)
            elif hit and isinstance(hit[1], ast.ClassDef):  # Class.classmethod(...)
                self.call_method(hit[0], hit[1], func.attr)

    def call_method(self, module: Module, cls: ast.ClassDef, name: str) -> None:
        found = self.method(module, cls, name)
        if found is not None:
            self.visit(module, cls, found)


def self_attribute(node) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def count(root: Path) -> tuple[int, dict[str, int], set[str]]:
    modules = load(root)
    module_name, class_name, method_name = ENTRY
    module = modules[module_name]
    cls = module.classes[class_name]
    walker = Walker(modules)
    walker.visit(module, cls, walker.method(module, cls, method_name))
    return sum(walker.seen.values()), walker.seen, walker.unresolved


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1] / "dflash_sglang")
    p.add_argument("--list", action="store_true", help="every function reached, with its branches")
    args = p.parse_args(argv)
    total, seen, unresolved = count(args.root)
    if args.list:
        for key, n in sorted(seen.items(), key=lambda kv: -kv[1]):
            print(f"{n:4d}  {key}")
        print("not followed:", ", ".join(sorted(unresolved)) or "none")
    by_folder = {}
    for key, n in seen.items():
        folder = key.split(":")[0].split(".")[0]
        by_folder[folder] = by_folder.get(folder, 0) + n
    parts = ", ".join(f"{folder} {n}" for folder, n in sorted(by_folder.items(), key=lambda kv: -kv[1]))
    print(f"{total} branches in {len(seen)} functions on the decode step's path ({parts})")


if __name__ == "__main__":
    main()
