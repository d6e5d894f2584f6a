"""The package has no import cycles at module level, and each module imports on its own in a
fresh interpreter (a cycle that happens to work in one import order breaks in another)."""
import ast
import os
import subprocess
import sys

import pytest

from paths import ROOT

PACKAGE = os.path.join(ROOT, "python", "dataflow")


def _module_name(path):
    rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


FILES = {_module_name(os.path.join(d, f)): os.path.join(d, f)
         for d, _, names in os.walk(PACKAGE) for f in names if f.endswith(".py")}
MODULES = sorted(FILES)  # dotted names: dataflow, dataflow.ops, dataflow.io.checkpoint, ...


def module_level_imports(name):
    """Modules of the package that `name` imports when it is imported (not inside functions);
    importing a.b.c also runs a and a.b (their __init__), which count too."""
    path = FILES[name]
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    with open(path) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("dataflow")):
            continue
        base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
        target = ".".join(base + ([node.module] if node.module else []))
        for t in [target] + [f"{target}.{a.name}" for a in node.names]:
            parts = t.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return (found & set(MODULES)) - {name}


def find_cycle(graph):
    """One cycle of the directed graph as a list of nodes, or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None
    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_level_import_cycle():
    # a package's __init__ importing its own modules is not a cycle: edges into the package
    # itself (a module importing its parent) are the ones left out
    graph = {m: {i for i in module_level_imports(m) if not m.startswith(i + ".")} for m in MODULES}
    assert find_cycle(graph) is None


@pytest.mark.slow
@pytest.mark.parametrize("module", [m for m in MODULES if not m.endswith("__main__")])  # __main__ runs the CLI
def test_module_imports_alone_in_a_fresh_interpreter(module):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("module", sorted({m.split(".")[1] for m in MODULES if "." in m and not m.split(".")[1].startswith("_")}))
def test_module_is_an_attribute_after_import_dataflow(module):
    code = f"import dataflow as df; m = df.{module}; assert m.__name__ == 'dataflow.{module}'; assert '{module}' in dir(df)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_readme_module_names_are_attributes():
    """Every dotted name the README writes as dataflow.X.Y or df.X.Y resolves (modules, subpackages,
    their functions and classes), so a move in the package cannot leave the README behind."""
    import importlib
    import re
    import dataflow as df
    with open(os.path.join(os.path.dirname(PACKAGE), "..", "README.md")) as f:
        names = set(re.findall(r"\b(?:dataflow|df)\.([a-z_][\w.]*\w)", f.read())) - {"pc"}
    assert {"vulkan.list_devices", "io.checkpoint", "io.pretrained", "io.safetensors", "ring.plan"} <= names
    for name in sorted(names):
        obj = df
        for part in name.split("."):
            if not hasattr(obj, part):
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            else:
                obj = getattr(obj, part)
    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        df.not_a_module


def test_no_test_module_imports_another():
    """What test files share lives in tests/helpers: a test module imported by another would run
    its module-level fixtures twice and ties files of different folders together."""
    tests = os.path.join(ROOT, "tests")
    offenders = []
    for folder, _, names in os.walk(tests):
        for name in names:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                    offenders += [f"{name}: {m}" for m in mods if m.split(".")[0].startswith("test_")]
    assert not offenders, offenders
