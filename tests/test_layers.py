"""The layers point one way: checked on the import statements themselves (by AST), so an import
inside a function or under ``TYPE_CHECKING`` counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convstore"


def _unit(module: str) -> str | None:
    """The package-level unit a ``convstore.x.y`` module belongs to (``x``), else None."""
    parts = module.split(".")
    if parts[0] != "convstore":
        return None
    return parts[1] if len(parts) > 1 else "convstore"


def _imports(unit: str) -> set[str]:
    """Every convstore unit the files of ``unit`` import, itself left out."""
    directory = PACKAGE / unit
    files = sorted(directory.rglob("*.py")) if directory.is_dir() else [PACKAGE / f"{unit}.py"]
    found: set[str] = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.ImportFrom) and node.level:
                pytest.fail(f"{file}: relative import; convstore imports by absolute name")
            for name in names:
                target = _unit(name)
                if target is not None and target != unit and _exists(target):
                    found.add(target)
    return found


def _exists(unit: str) -> bool:
    return (PACKAGE / unit).is_dir() or (PACKAGE / f"{unit}.py").is_file()


def graph() -> dict[str, set[str]]:
    """Each unit of the package (a subpackage or a top-level module): what it imports."""
    units = sorted(
        p.name if p.is_dir() else p.stem
        for p in PACKAGE.iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file())
        or (p.suffix == ".py" and p.name != "__init__.py")
    )
    return {unit: _imports(unit) for unit in units}


FORBIDDEN = {
    "domain": {"projections", "infrastructure", "store", "cli", "bootstrap", "convert"},
    "projections": {"infrastructure", "store", "cli", "bootstrap"},
    "infrastructure": {"store", "cli", "bootstrap", "verify", "projector", "aio"},
}


@pytest.mark.parametrize("unit", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_ones(unit: str) -> None:
    """domain, projections and infrastructure import nothing from the layers above them."""
    wrong = _imports(unit) & FORBIDDEN[unit]
    assert not wrong, f"convstore.{unit} imports {sorted(wrong)}"


def test_store_does_not_import_its_callers() -> None:
    """convstore.store imports neither verify, the composition root nor the command line."""
    assert not _imports("store") & {"verify", "bootstrap", "cli", "projector", "aio"}


def test_nothing_below_the_cli_imports_it() -> None:
    """Only the console-script entry (convstore.console) imports convstore.cli."""
    importers = {unit for unit, deps in graph().items() if "cli" in deps}
    assert importers <= {"console"}, importers


def test_the_checker_sees_imports() -> None:
    """The checker is not vacuous: it finds imports that do exist (downward ones)."""
    assert "domain" in _imports("infrastructure")
    assert "store" in _imports("bootstrap")
