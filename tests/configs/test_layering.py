"""Layers import downwards only: `router` → `deployments` → `engine` → `npu_ops` → `configs`.

Read from the source with `ast` (nothing is imported), every `import` counts: at module level,
inside functions (lazy imports) and under `if TYPE_CHECKING:`. Relative imports cannot reach
another top-level package, so only absolute ones are checked. `operate/` (operator tooling) and
`fixtures/` (fixture generators) sit above the serving layers, beside each other: they may import
any layer, no layer imports them, and neither imports the other, so no import circle runs through
them. `cli/`, `load_tests/` and `tests/` sit above everything and nothing below imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = ("router", "deployments", "engine", "npu_ops", "configs")
"""Top to bottom: a package may import the packages after it, never those before it."""

TOOLS = ("operate", "fixtures")
"""Above every layer, beside each other."""

ABOVE_ALL = ("cli", "load_tests", "tests")


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in the file at `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.partition(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.partition(".")[0]))
    return found


def forbidden(package: str) -> set[str]:
    """The top-level packages `package` may not import."""
    if package in TOOLS:
        return {*TOOLS, *ABOVE_ALL} - {package}
    return {*LAYERS[: LAYERS.index(package)], *TOOLS, *ABOVE_ALL}


def upward_imports(package: str) -> list[str]:
    """`file:line imports <package>` for each import of a package `package` may not import."""
    above = forbidden(package)
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, target in imported_packages(path)
        if target in above
    ]


@pytest.mark.parametrize("package", (*LAYERS, *TOOLS))
def test_layer_imports_only_downwards(package: str) -> None:
    allowed = [p for p in (*LAYERS, *TOOLS) if p != package and p not in forbidden(package)]
    assert upward_imports(package) == [], (
        f"{package}/ may import only {allowed} among the layers (docs/architecture.md); move "
        "the shared code down or the caller up"
    )


def test_every_top_level_package_has_a_place() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == {*LAYERS, *TOOLS, *ABOVE_ALL} - {"tests"}


def test_the_walk_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from router.policy import decide\n"
        "def f():\n"
        "    import engine.llm_engine\n"
        "from . import sibling\n"
    )
    assert sorted(imported_packages(source)) == [(1, "typing"), (3, "router"), (5, "engine")]
