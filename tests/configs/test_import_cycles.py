"""No import circles among our own modules.

The graph is read from the source with `ast` (nothing is imported). Every `import` is an edge:
at module level, inside functions (lazy imports) and under `if TYPE_CHECKING:`. A lazy or
type-checking import does not fail at run time, but it still means that neither module can be
read, moved or tested without the other: a circle is two concepts that belong in one module, or
a shared piece that belongs in a module of its own below both.

An edge goes to the most specific module that exists: `from a.b import c` reaches `a/b/c.py`
when there is one, else `a/b/__init__.py`. Importing `a.b.c` also runs `a/__init__.py` and
`a/b/__init__.py`, but those implied edges are not counted: a package `__init__` that imports
its own submodules to name them would otherwise always be a circle with each of them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = tuple(sorted(init.parent.name for init in ROOT.glob("*/__init__.py")))
"""Every first-party package: each top-level folder with an `__init__.py` (`tests/` has none)."""


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> its file, for every `.py` file under `packages` in `root` (a
    package is named by its `__init__.py`)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The dotted name each import in the file reaches: `import m` reaches `m`; `from m import x`
    reaches the submodule `m.x` when there is one, else `m`."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                yield submodule if submodule in modules else source


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports (itself excluded; imports of anything else,
    the standard library and third-party packages, are dropped)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported(module, path, modules):
            while name and name not in modules:  # `a.b.func` -> `a.b`
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_import_cycles() -> None:
    assert {"router", "engine", "configs", "operate", "fixtures"} <= set(PACKAGES), PACKAGES
    graph = import_graph(module_files(ROOT, PACKAGES))
    assert "router.gateway" in graph and graph["router.gateway"], "the walk found no imports"
    assert cycles(graph) == [], (
        "modules that import each other, directly or round a loop (TYPE_CHECKING and lazy "
        "imports count): move the piece both need into a module of its own below them"
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_walk_finds_a_known_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.leaf import LEAF\n",
            "pkg/leaf.py": "LEAF = 1\n",
            "pkg/a.py": "from pkg.b import f\n",
            "pkg/b.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from pkg.c import C\n",
            "pkg/c.py": "def g():\n    from pkg import a\n",
            "pkg/d.py": "from . import leaf\nfrom .a import f\n",
            "other/__init__.py": "",
            "other/x.py": "import pkg.leaf\nfrom pkg import LEAF\n",
        },
    )
    graph = import_graph(module_files(tmp_path, ("pkg", "other")))
    assert graph["pkg.d"] == {"pkg.leaf", "pkg.a"}, "relative imports resolve"
    assert graph["pkg.c"] == {"pkg.a"}, "a lazy `from pkg import a` reaches the submodule"
    assert graph["other.x"] == {"pkg.leaf", "pkg"}, "a name from `pkg` reaches its __init__"
    assert graph["pkg.leaf"] == set() and graph["pkg"] == {"pkg.leaf"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
