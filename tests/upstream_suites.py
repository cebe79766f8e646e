"""The frameworks' own test files, fetched for the installed version of each framework.

convstore does not copy another project's tests: a test that runs one downloads the source
distribution of the very version installed (``pip download --no-binary :all:``, from the
package index the project installs from), keeps it in a cache outside the checkout, and runs
the upstream file from that tree with convstore's adapter swapped in by a plugin of ours
(``tests/upstream/``). Where it cannot be fetched (no index reachable), the test skips and
says why, unless ``CONVSTORE_REQUIRE_UPSTREAM`` is set (CI sets it), when it fails.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "convstore-upstream"
PLUGINS = Path(__file__).parent / "upstream"


@dataclass(frozen=True)
class Upstream:
    """A framework's source tree, as its index serves it for the installed version."""

    dist: str
    version: str
    root: Path
    sha256: str

    @property
    def origin(self) -> str:
        return f"{self.dist} {self.version} sdist (sha256 {self.sha256[:16]}…)"


def upstream(dist: str) -> Upstream:
    """The source distribution of ``dist`` at its installed version, unpacked (cached)."""
    wanted = version(dist)
    folder = CACHE / f"{dist}-{wanted}"
    archives = sorted(folder.glob("*.tar.gz")) if folder.is_dir() else []
    if not archives:
        folder.mkdir(parents=True, exist_ok=True)
        fetched = subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
                *("--no-binary", ":all:", f"{dist}=={wanted}", "-d", str(folder)),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        archives = sorted(folder.glob("*.tar.gz"))
        if fetched.returncode or not archives:
            reason = (fetched.stderr.strip().splitlines() or ["no archive"])[-1]
            _unavailable(f"{dist} {wanted}'s source could not be fetched: {reason}")
    archive = archives[0]
    root = folder / archive.name.removesuffix(".tar.gz")
    if not root.is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return Upstream(dist, wanted, root, digest)


def _unavailable(reason: str) -> None:
    if os.environ.get("CONVSTORE_REQUIRE_UPSTREAM"):
        pytest.fail(reason)
    pytest.skip(reason)


def run_upstream(
    tree: Upstream, plugin: str, files: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The upstream ``files`` run by pytest in their own tree (its own configuration), with
    our ``plugin`` (a module of ``tests/upstream/``) swapping convstore in."""
    environment = {**os.environ, **env}
    environment["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), str(tree.root)])
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", plugin, "-p", "no:cacheprovider"),
            *("-q", "-rxXs", "-o", "addopts=", *files),
        ],
        cwd=tree.root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
