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
        "convstore.infrastructure.postgres",
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


LISTS_ONLY = """
import sys
from convstore import open_store
from convstore.domain.blocks import BLOCK_CLASSES
from convstore.domain.events import EVENT_ADAPTER, EVENT_CLASSES
models = [*BLOCK_CLASSES, *EVENT_CLASSES]
assert not any(m.__pydantic_complete__ for m in models), "built at import"
with open_store(sys.argv[1], create=False) as store:
    listed = list(store.conversations())
built = [m.__name__ for m in models if m.__pydantic_complete__]
print(len(listed), EVENT_ADAPTER.pydantic_complete, built)
"""


def test_a_process_that_decodes_no_event_builds_no_domain_model(tmp_path: Path) -> None:
    """The domain's pydantic models and adapters are built on first use: importing convstore
    builds none, and a fresh process that only lists conversations (from the listing index,
    decoding no event) builds none either."""
    location = tmp_path / "s.db"
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
    run = [sys.executable, "-c", LISTS_ONLY, str(location)]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    assert out.stdout.split(maxsplit=1) == ["1", "False []\n"]


def test_replay_model_is_accepted_ignored_and_deprecated(tmp_path: Path) -> None:
    """``open_store(replay_model=...)`` and ``open_async_store``'s keep working for one
    release: any value opens the store as without it, with a DeprecationWarning saying it no
    longer does anything, pointing at the caller's line."""
    import asyncio  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    for value in (True, False, "on_read"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with convstore.open_store(tmp_path / "s.db", replay_model=value) as store:
                conv = store.new_conversation()
                store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
                assert store.replay(conv)["messages"] == [{"role": "user", "content": "hello"}]
        [warning] = caught
        assert warning.category is DeprecationWarning
        assert "no longer does anything" in str(warning.message)
        assert warning.filename == __file__

    async def opened() -> None:
        store = await convstore.open_async_store(tmp_path / "s.db", replay_model=True)
        await store.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(opened())
    assert [w.category for w in caught] == [DeprecationWarning]
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        convstore.open_store(tmp_path / "s.db").close()  # not given: no warning


BUILD = """
import pydantic
from convstore import build_models
from convstore.domain import blocks, events
def parts():
    for module in (blocks, events):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
                if value.__module__ == module.__name__:
                    yield value.__name__, value.__pydantic_complete__
            elif isinstance(value, pydantic.TypeAdapter):
                yield repr(value), value.pydantic_complete
before = dict(parts())
build_models()
after = dict(parts())
print(sum(before.values()), len(after), sorted(k for k, done in after.items() if not done))
"""


def test_build_models_builds_every_domain_model_and_adapter_at_once(tmp_path: Path) -> None:
    """``build_models()`` takes the validators' build out of a writer's first append: before
    it nothing of the domain is built, after it every model and adapter is; a store's first
    append calls it itself (before its write transaction), so after that append everything is
    built too."""
    out = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, check=True)
    built_before, count, left = out.stdout.split(maxsplit=2)
    assert built_before == "0"
    assert int(count) > 20  # every block and event model, and the adapters
    assert left.strip() == "[]"
    first_append = BUILD.replace(
        "build_models()\n",
        "from convstore import open_store\n"
        f"store = open_store({str(tmp_path / 's.db')!r})\n"
        "conv = store.new_conversation()\n"
        "store.append_message(conv, 'user', [{'type': 'text', 'text': 'hi'}])\n",
    )
    assert first_append != BUILD
    out = subprocess.run(
        [sys.executable, "-c", first_append], capture_output=True, text=True, check=True
    )
    assert out.stdout.split(maxsplit=2)[0] == "0"
    assert out.stdout.split(maxsplit=2)[2].strip() == "[]"


FIRST_USE_IN_THREADS = """
import sys, threading
from convstore import open_store
from convstore.domain.blocks import DEFERRED
from convstore.domain.events import EVENT_CLASSES
assert not DEFERRED["defer_build"] or not any(m.__pydantic_complete__ for m in EVENT_CLASSES)
store = open_store(sys.argv[1])
start = threading.Barrier(8)
errors = []
def write(i):
    start.wait()
    try:
        conv = store.new_conversation(title=f"t{i}")
        call = {"type": "tool_use", "id": f"c{i}", "name": "ls", "input": {"i": i}}
        store.append_message(conv, "assistant", [{"type": "text", "text": f"hi {i}"}, call])
        result = {"type": "tool_result", "tool_use_id": f"c{i}", "content": "out"}
        store.append_message(conv, "user", [result])
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(store.conversations()), errors)
"""


def test_threads_building_the_models_on_first_use_all_write(tmp_path: Path) -> None:
    """Eight threads of a fresh process make their first writes at once, so the models they
    use are built while other threads validate with them: every write lands (pydantic from
    2.14 builds under a lock; before it, convstore builds them at import)."""
    for run in range(3):
        location = tmp_path / f"s{run}.db"
        out = subprocess.run(
            [sys.executable, "-c", FIRST_USE_IN_THREADS, str(location)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "8 []", out.stdout


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
