"""The house: no import circle, no import upwards, no module over 400 lines.

Layers, bottom up: `tff_radiomap` (the library), `baselines` (the comparison methods, built from
the library), `programs` (binaries). A module may import its own layer and the ones below. Every
import statement counts, at module level or inside a function (a lazy import still ties the two
modules together); `from package import name` counts as an import of the submodule `name` where
there is one, else of the package. The graph is read from the source with `ast`: nothing is
imported.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("tff_radiomap", "baselines", "programs")  # Bottom up.
MAX_LINES = 400


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(module: str, path: pathlib.Path, node: ast.Import | ast.ImportFrom, modules) -> set[str]:
    """The modules of this project that `node`, in `module`, imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in modules:  # `import a.b.c` of a name inside a module: the module.
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        nodes = [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]
        graph[module] = set().union(*(_imported(module, path, n, modules) for n in nodes))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (the import circles)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_graph_sees_module_package_and_from_imports():
    graph = import_graph()
    assert "tff_radiomap.experiments.privacy_accounting" in graph["tff_radiomap.experiments.saved_runs"]  # A module by name.
    assert "tff_radiomap.aggregators.top_k" in graph["tff_radiomap.aggregators"]  # `from a.b import Name`: the module.
    assert "tff_radiomap.runtime.tff_exit" in graph["tff_radiomap"]
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    circles = strongly_connected(import_graph())
    assert not circles, "import circles (each a set of modules that import each other): " + "; ".join(" <-> ".join(c) for c in circles)


def test_no_imports_upwards():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upwards = [f"{m} -> {t}" for m, targets in sorted(import_graph().items()) for t in sorted(targets) if rank[t.split(".")[0]] > rank[m.split(".")[0]]]
    assert not upwards, f"imports from a lower layer into a higher one ({' < '.join(LAYERS)}): " + ", ".join(upwards)


def test_no_module_over_400_lines():
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split each along a seam a reader would name): {long}"
