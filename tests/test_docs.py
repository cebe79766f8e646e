"""The docs match the code: the README and every page under docs/ run their examples, the CLI
reference is what the commands print, the API reference names every public name, and CI runs
the README's test command and builds the docs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import click
import pytest

from convstore.cli import cli, command_names
from convstore.ports.chain import CHAIN_SINCE

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _fenced(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def _examples() -> list[tuple[str, str]]:
    """Every ```python block of the README and the docs pages, named ``page:index``."""
    found = []
    for page in PAGES:
        blocks = _fenced("python", page.read_text(encoding="utf-8"))
        found += [(f"{page.relative_to(ROOT)}:{i}", code) for i, code in enumerate(blocks)]
    return found


EXAMPLES = _examples()


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_python_examples_run(
    name: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Python block of the README and the docs runs, each in a fresh folder of its own,
    and its asserts hold."""
    monkeypatch.chdir(tmp_path)
    exec(compile(code, name, "exec"), {})  # noqa: S102


def test_the_docs_have_examples_to_run() -> None:
    """The example collector finds the pages' blocks (a changed fence would make it find none)."""
    pages = {name.split(":")[0] for name, _ in EXAMPLES}
    assert "README.md" in pages
    assert len(pages) >= 10, pages


def test_python_examples_run_in_order_in_one_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader pasting the README's and the docs' Python blocks one after another into one
    session, in one folder, sees every one pass: each opens a fresh temporary store of its own,
    so none depends on another, and none leaves a file in the working directory."""
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    for name, code in EXAMPLES:
        exec(compile(code, name, "exec"), {})  # noqa: S102
    assert list(work.iterdir()) == []


@pytest.mark.slow
def test_the_cli_reference_is_current() -> None:
    """docs/cli-reference.md is what tools/cli_reference.py makes from the commands now."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_cli_command_has_its_reference_section() -> None:
    """The reference has a section per command, audit's subcommands included."""
    reference = (DOCS / "cli-reference.md").read_text(encoding="utf-8")
    assert isinstance(cli, click.Group)
    for name in command_names():
        assert f"## `convstore {name}`" in reference, name
    with click.Context(cli) as ctx:
        audit = cli.get_command(ctx, "audit")
        assert isinstance(audit, click.Group)
        for sub in audit.list_commands(ctx):
            assert f"### `convstore audit {sub}`" in reference, sub


def test_the_cli_guide_places_every_command() -> None:
    """The hand-written guide links each command to its reference entry, so a new command
    needs a line of prose saying what it is for."""
    guide = (DOCS / "cli.md").read_text(encoding="utf-8")
    for name in command_names():
        link = f"[`convstore {name}`](cli-reference.md#convstore-{name})"
        assert link in guide, f"docs/cli.md does not place `convstore {name}`"


def test_shell_examples_name_only_real_commands() -> None:
    """Each `convstore X` in a shell block of the README or the docs is a real command."""
    used: dict[str, str] = {}
    for page in PAGES:
        for block in _fenced("bash", page.read_text(encoding="utf-8")):
            pattern = r"(?:^|[\s|(])(?:\.venv/bin/)?convstore (?:--db \S+ )?([a-z][a-z-]*)"
            for word in re.findall(pattern, block, flags=re.MULTILINE):
                used.setdefault(word, str(page.relative_to(ROOT)))
    unknown = {word: page for word, page in used.items() if word not in command_names()}
    assert not unknown
    assert {"new", "append", "replay", "import", "erase"} <= set(used)


@pytest.mark.slow
def test_the_readme_cli_tour_runs(tmp_path: Path) -> None:
    """The README's CLI tour runs as written, in bash, in a fresh folder: every line exits 0."""
    [tour] = [b for b in _fenced("bash") if "export CONVSTORE_DB=" in b]
    script = tmp_path / "tour.sh"
    script.write_text(tour)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVSTORE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Tool use: ls" in proc.stdout
    assert (tmp_path / "triage.md").is_file()


def test_the_readme_is_a_front_door() -> None:
    """The README stays short (the manual is docs/), and every file it links to exists."""
    assert len(README.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run contains the README's test command word for word."""
    commands = [block.strip() for block in _fenced("bash") if "pytest" in block]
    assert len(commands) == 1
    assert commands[0] in CI.splitlines()


def test_ci_builds_the_docs_with_warnings_as_errors() -> None:
    """.ci/run builds the docs site strictly, after the type check."""
    lines = [line.strip() for line in CI.splitlines()]
    assert ".venv/bin/mkdocs build --strict" in lines
    assert lines.index(".venv/bin/mkdocs build --strict") > lines.index(".venv/bin/mypy")


def test_readme_main_command_runs_the_demo() -> None:
    """The README's main-job command installs the project and runs `convstore demo`."""
    [command] = [b.strip() for b in _fenced("bash") if b.strip().endswith("convstore demo")]
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -e .")
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


def test_every_public_name_resolves() -> None:
    """Each name in convstore.__all__ loads (the package exports them lazily)."""
    import convstore  # noqa: PLC0415

    for name in convstore.__all__:
        assert getattr(convstore, name) is not None, name


def test_the_api_reference_documents_every_public_name() -> None:
    """docs/reference/python.md renders exactly the names of convstore.__all__."""
    import convstore  # noqa: PLC0415

    page = (DOCS / "reference" / "python.md").read_text(encoding="utf-8")
    documented = re.findall(r"^::: convstore\.(\w+)$", page, flags=re.MULTILINE)
    assert sorted(documented) == sorted(set(documented))
    assert set(documented) == set(convstore.__all__)


def test_the_chain_release_is_this_release_or_older_and_the_docs_name_it() -> None:
    """Hash chains are said to start at ``CHAIN_SINCE``: that release is not newer than the
    installed version (pyproject's), and the Guarantees page names the same release."""

    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.removeprefix("v").split("."))

    assert parts(CHAIN_SINCE) <= parts(version("convstore"))[: len(parts(CHAIN_SINCE))]
    guarantees = (DOCS / "guarantees.md").read_text(encoding="utf-8")
    assert f'unchained (written before {CHAIN_SINCE})"' in guarantees


def test_every_install_hint_works_from_a_checkout() -> None:
    """convstore is on no package index, so no hint in the code, the benchmarks or the README says
    ``pip install convstore`` or ``pip install 'convstore[…]'``: extras are installed with
    ``pip install -e '.[extra]'`` in the checkout."""
    texts = {str(page.relative_to(ROOT)): page.read_text(encoding="utf-8") for page in PAGES}
    for path in sorted([*(ROOT / "src" / "convstore").rglob("*.py"), *ROOT.glob("bench/*.py")]):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    unservable = re.compile(r"pip install ['\"]?convstore\b")
    for name, text in texts.items():
        assert not unservable.search(text), f"{name}: {unservable.search(text)}"


def test_the_cli_guide_and_the_db_help_name_every_backend_scheme() -> None:
    """Issue 39 item 24: the CLI guide's `--db` paragraph and the top-level `--help` name the
    same kinds of location, every scheme the backend registry knows among them (the guide
    said "a file path or a PostgreSQL URL, nothing else" while `nats://` works)."""
    from convstore.infrastructure import BACKENDS  # noqa: PLC0415 - only this test needs it

    guide = (DOCS / "cli.md").read_text(encoding="utf-8")
    paragraph = guide[guide.index("`--db` (and `CONVSTORE_DB`") :].split("\n\n", 1)[0]
    db_help = next(p.help for p in cli.params if p.name == "db")
    assert db_help is not None
    for scheme in {"postgresql", "nats"} | {s for s in BACKENDS if s != "postgres"}:
        assert f"{scheme}://" in paragraph, scheme
        assert f"{scheme}://" in db_help, scheme
