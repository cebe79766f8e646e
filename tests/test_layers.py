"""The layers point one way, and no module imports itself in a circle.

Checked on the import statements themselves (by AST), so an import inside a function or under
``TYPE_CHECKING`` counts as much as one at the top. The ranks are drawn in
``docs/architecture.md``; :data:`RANKS` is the same list, lowest first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convstore"

RANKS: list[tuple[str, ...]] = [
    ("domain",),
    ("convert", "projections"),
    ("engine",),
    ("views",),
    ("ports",),
    ("infrastructure",),
    ("store", "audit"),
    ("recording",),
    ("integrations",),
    ("app",),
    ("web",),
    ("cli",),
]
"""Every folder of the package, lowest rank first. A module may import its own folder and any
folder of a lower rank; folders that share a rank are independent of each other."""

FACE = {"convstore", "convstore.console"}
"""The package face (re-exports) and the console entry point: the only modules outside a
ranked folder, and allowed to import any of them."""

DEPRECATED_ALIASES = {
    "convstore.convert.openai_record": "convstore.recording.openai",
    "convstore.convert.anthropic_record": "convstore.recording.anthropic",
    "convstore.transfer": "convstore.app.export",
    "convstore.aio": "convstore.store.aio",
}
"""Old module paths the docs once gave, kept for one release (see CHANGELOG.md) as re-exports
of their new homes. They are outside the ranks, and nothing in the package imports them."""

RANK_OF = {unit: rank for rank, units in enumerate(RANKS) for unit in units}


def module_name(file: Path) -> str:
    parts = list(file.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(file): file for file in sorted(PACKAGE.rglob("*.py"))}


def _imported(file: Path) -> Iterator[str]:
    """Every convstore module a file imports, at any depth of its syntax tree."""
    for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            pytest.fail(f"{file}: relative import; convstore imports by absolute name")
        elif isinstance(node, ast.ImportFrom) and node.module:
            # ``from pkg import sub`` imports the module pkg.sub; ``from mod import name``, mod
            submodules = [f"{node.module}.{a.name}" for a in node.names]
            names = [name for name in submodules if name in MODULES] or [node.module]
            names += [node.module] if len(names) < len(submodules) else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # importlib.import_module("convstore.x") and lazy tables of module names
            named = node.value.partition(":")[0]
            if "." in named and named in MODULES:
                names = [named]
        for imported in names:
            module = imported
            while module and module not in MODULES:
                module = module.rpartition(".")[0]
            if module.startswith("convstore"):
                yield module


def graph() -> dict[str, set[str]]:
    """Each module of the package: the other convstore modules it imports."""
    return {
        name: {target for target in _imported(file) if target != name}
        for name, file in MODULES.items()
    }


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and module not in FACE) else None


def test_every_module_has_a_rank() -> None:
    """No loose module: everything but the face and the aliases sits in a ranked folder."""
    loose = [
        name
        for name in MODULES
        if name not in FACE and name not in DEPRECATED_ALIASES and unit_of(name) not in RANK_OF
    ]
    assert not loose, f"modules outside a ranked folder: {loose}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(RANK_OF), folders ^ set(RANK_OF)


def test_imports_only_point_down() -> None:
    """A module imports its own folder or lower-ranked ones, never an equal or higher one."""
    wrong = []
    for module, targets in graph().items():
        if module in FACE or module in DEPRECATED_ALIASES:
            continue
        here = unit_of(module)
        assert here is not None
        for target in targets:
            there = unit_of(target)
            if target in DEPRECATED_ALIASES:
                wrong.append(f"{module} imports the deprecated alias {target}")
            elif there is None:
                wrong.append(f"{module} imports the package face {target}")
            elif there != here and RANK_OF[there] >= RANK_OF[here]:
                wrong.append(f"{module} (rank {RANK_OF[here]}) imports {target} ({RANK_OF[there]})")
    assert not wrong, "\n".join(sorted(wrong))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    """No module reaches itself through its imports, counting function-local and
    TYPE_CHECKING imports, within a folder as much as across folders."""
    assert cycles(graph()) == []


def test_the_checkers_are_not_vacuous() -> None:
    """The checkers find what exists: downward imports, and a cycle made on purpose."""
    edges = graph()
    assert "convstore.domain.blocks" in edges["convstore.domain.events"]
    assert any(unit_of(t) == "domain" for t in edges["convstore.store"])
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize(("old", "new"), sorted(DEPRECATED_ALIASES.items()))
def test_deprecated_aliases_reexport_their_new_home(old: str, new: str) -> None:
    """An old module path still gives the same objects as its new home."""
    import importlib  # noqa: PLC0415 - only these cases import the aliases

    moved, alias = importlib.import_module(new), importlib.import_module(old)
    public = [name for name in vars(moved) if not name.startswith("_")]
    assert public
    for name in getattr(alias, "__all__", public):
        assert getattr(alias, name) is getattr(moved, name), name
