"""Layers import downwards only: `router` → `deployments` → `engine` → `npu_ops` → `configs`.

Read from the source with `ast` (nothing is imported), every `import` counts: at module level,
inside functions (lazy imports) and under `if TYPE_CHECKING:`. Relative imports cannot reach
another top-level package, so only absolute ones are checked. `cli/` and `load_tests/` sit above
every layer and no layer imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = ("router", "deployments", "engine", "npu_ops", "configs")
"""Top to bottom: a package may import the packages after it, never those before it."""

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


def upward_imports(package: str) -> list[str]:
    """`file:line imports <package>` for each import of a layer above `package`."""
    above = {*LAYERS[: LAYERS.index(package)], *ABOVE_ALL}
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, target in imported_packages(path)
        if target in above
    ]


@pytest.mark.parametrize("package", LAYERS)
def test_layer_imports_only_downwards(package: str) -> None:
    assert upward_imports(package) == [], (
        f"{package}/ may import only {list(LAYERS[LAYERS.index(package) + 1 :])} among the "
        "layers (docs/architecture.md); move the shared code down or the caller up"
    )


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
