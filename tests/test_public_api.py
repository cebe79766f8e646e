"""The package's public names: one list, kept in step with what type checkers see, and an
import of the command line that leaves the process environment alone."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import convstore

INIT = Path(convstore.__file__)


def _type_checking_imports() -> dict[str, str]:
    """Each name the ``TYPE_CHECKING`` block of ``convstore/__init__.py`` imports: its module."""
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                assert stmt.module is not None
                for alias in stmt.names:
                    assert alias.asname in (None, alias.name), ast.unparse(stmt)
                    found[alias.name] = stmt.module
    return found


def test_type_checking_imports_match_the_export_list() -> None:
    """The TYPE_CHECKING imports name exactly the exported names, each from its module."""
    assert _type_checking_imports() == convstore._EXPORTS


def test_all_is_the_export_list() -> None:
    """``__all__`` is the export list, every name loads, and each is that module's object."""
    assert sorted(convstore.__all__) == sorted(convstore._EXPORTS)
    for name, module in convstore._EXPORTS.items():
        assert getattr(convstore, name) is getattr(importlib.import_module(module), name), name


def test_the_types_the_api_returns_are_exported() -> None:
    """What Store's public methods return (and import_history takes) can be named from the top."""
    for name in (
        "Compacted",
        "Rewound",
        "RecordedMessage",
        "Pressure",
        "ImportReport",
        "LoadReport",
        "History",
        "ConversationInfo",
        "Recorded",
        "Head",
        "AsyncStore",
    ):
        assert name in convstore.__all__, name


def test_importing_the_cli_sets_no_environment_variable() -> None:
    """Importing convstore.cli leaves PYDANTIC_DISABLE_PLUGINS unset; the console script sets it."""
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    code = (
        "import os, convstore.cli, convstore.console\n"
        "print(os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "None"
    script = (
        "import os, sys, convstore.console\n"
        "sys.argv = ['convstore', '--help']\n"
        "try:\n"
        "    convstore.console.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('PYDANTIC_DISABLE_PLUGINS'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "__all__"


def test_the_console_module_imports_nothing_heavy_before_setting_the_variable() -> None:
    """convstore.console imports only ``os`` at module level, so pydantic is not loaded early."""
    tree = ast.parse(Path(convstore.__file__).with_name("console.py").read_text())
    top = [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert top == ["import os"]
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    code = "import sys, convstore.console\nprint('pydantic' in sys.modules)\n"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_open_store_leaves_the_unused_parts_unimported() -> None:
    """``from convstore import open_store`` loads the sync read and write path only: no
    asyncio (nor the async store and its thread pools), no PostgreSQL backend, converter, web,
    view, audit or command-line module, so a script that opens a SQLite store pays for none."""
    code = "import sys\nfrom convstore import open_store\nprint('\\n'.join(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "convstore.app.bootstrap" in loaded  # the check runs on a real import
    unwanted = {"asyncio", "concurrent.futures", "click", "psycopg", "sqlite_utils"}
    assert sorted(unwanted & loaded) == []
    heavy_parts = (
        "convstore.store.aio",
        "convstore.app.aio",
        "convstore.backends.postgres",
        "convstore.web",
        "convstore.views",
        "convstore.audit",
        "convstore.cli",
        "convstore.recording",
        "convstore.integrations",
    )
    assert sorted(m for m in loaded if m.startswith(heavy_parts)) == []
    converters = {m for m in loaded if m.startswith("convstore.convert.")}
    assert converters == {"convstore.convert.history"}  # the History type import_history takes


def test_every_error_lives_in_the_one_error_module_and_is_exported() -> None:
    """No module but ``convstore.domain.errors`` defines a ConvstoreError, and the package
    exports every class that module defines."""
    package = INIT.parent
    elsewhere = []
    for file in sorted(package.rglob("*.py")):
        if file == package / "domain" / "errors.py":
            continue
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base) for base in node.bases}
                family = vars(importlib.import_module("convstore.domain.errors"))
                if any(isinstance(family.get(b), type) for b in bases):
                    elsewhere.append(f"{file.relative_to(package)}: {node.name}")
    assert elsewhere == []
    errors = importlib.import_module("convstore.domain.errors")
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and value.__module__ == errors.__name__
    }
    assert defined <= set(convstore.__all__), defined - set(convstore.__all__)
    assert "ReadModelBusy" in defined
