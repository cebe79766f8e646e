"""The README matches the code: its examples run, its commands exist, CI runs its test command."""

from __future__ import annotations

import os
import re
import tempfile
from importlib.metadata import version
from pathlib import Path

import click
import pytest

from convstore.cli import cli, command_names
from convstore.ports.chain import CHAIN_SINCE

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


@pytest.mark.parametrize("index", range(len(_fenced("python"))))
def test_readme_python_examples_run(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Python block in the README runs, and its asserts hold."""
    monkeypatch.chdir(tmp_path)
    code = _fenced("python")[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {})  # noqa: S102


def test_readme_python_examples_run_in_order_in_one_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader pasting the README's Python blocks one after another into one session, in one
    folder, sees every one pass: each opens a fresh temporary store of its own, so none
    depends on another, and none leaves a file in the working directory."""
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    for index, code in enumerate(_fenced("python")):
        exec(compile(code, f"README.md python block {index}", "exec"), {})  # noqa: S102
    assert list(work.iterdir()) == []


def test_every_cli_command_is_documented() -> None:
    """Each command the CLI has appears in the README's command table."""
    assert isinstance(cli, click.Group)
    for name in command_names():
        assert f"`convstore {name}" in README, f"README does not document `convstore {name}`"


def test_readme_documents_no_command_the_cli_lacks() -> None:
    """Each `convstore X` in the README's command table is a real command."""
    documented = set(re.findall(r"^\| `convstore ([a-z-]+)", README, flags=re.MULTILINE))
    assert isinstance(cli, click.Group)
    assert documented == set(command_names())


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run contains the README's test command word for word."""
    commands = [block.strip() for block in _fenced("bash") if "pytest" in block]
    assert len(commands) == 1
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[0] in ci.splitlines()


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


def test_the_chain_release_is_this_release_or_older_and_the_readme_names_it() -> None:
    """Hash chains are said to start at ``CHAIN_SINCE``: that release is not newer than the
    installed version (pyproject's), and the README's Guarantees name the same release."""

    def parts(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.removeprefix("v").split("."))

    assert parts(CHAIN_SINCE) <= parts(version("convstore"))[: len(parts(CHAIN_SINCE))]
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert f'unchained (written before {CHAIN_SINCE})"' in readme


def test_every_install_hint_works_from_a_checkout() -> None:
    """convstore is on no package index, so no hint in the code, the benchmarks or the README says
    ``pip install convstore`` or ``pip install 'convstore[…]'``: extras are installed with
    ``pip install -e '.[extra]'`` in the checkout."""
    texts = {"README.md": README}
    for path in sorted([*(ROOT / "src" / "convstore").rglob("*.py"), *ROOT.glob("bench/*.py")]):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    unservable = re.compile(r"pip install ['\"]?convstore\b")
    for name, text in texts.items():
        assert not unservable.search(text), f"{name}: {unservable.search(text)}"
