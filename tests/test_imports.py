"""The package has no import cycles at module level, and each module imports on its own in a
fresh interpreter (a cycle that happens to work in one import order breaks in another)."""
import ast
import os
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "dataflow")
MODULES = sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py"))


def module_level_imports(name):
    """Modules of the package that `name` imports when it is imported (not inside functions)."""
    with open(os.path.join(PACKAGE, name + ".py")) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
    return found & set(MODULES)


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
    graph = {m: module_level_imports(m) - {"__init__"} for m in MODULES if m != "__init__"}
    assert find_cycle(graph) is None


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES)
def test_module_imports_alone_in_a_fresh_interpreter(module):
    name = "dataflow" if module == "__init__" else f"dataflow.{module}"
    r = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("module", [m for m in MODULES if not m.startswith("_")])
def test_module_is_an_attribute_after_import_dataflow(module):
    code = f"import dataflow as df; m = df.{module}; assert m.__name__ == 'dataflow.{module}'; assert '{module}' in dir(df)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_readme_module_names_are_attributes():
    """The modules the README names as dataflow.X or df.X."""
    import re
    import dataflow as df
    with open(os.path.join(os.path.dirname(PACKAGE), "..", "README.md")) as f:
        names = set(re.findall(r"\b(?:dataflow|df)\.([a-z_]+)\b", f.read())) - {"pc"}
    assert names >= {"vulkan", "checkpoint", "pretrained", "safetensors_io"}
    for name in sorted(names):
        assert hasattr(df, name), name
    with pytest.raises(AttributeError, match="no attribute 'not_a_module'"):
        df.not_a_module
