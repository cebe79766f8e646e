"""`convstore audit serve`: the audit read model in a real Datasette, read-only."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from convstore import open_store
from convstore.app.demo import record_demo

pytest.importorskip("datasette", reason="audit serve needs the web extra (convstore[web])")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our own loopback
        return json.loads(response.read())


@pytest.mark.slow
def test_audit_serve_offers_canned_queries_and_cannot_write(tmp_path: Path) -> None:
    """Datasette serves the audit file on 127.0.0.1 with both canned queries, refusing writes."""
    db, audit = tmp_path / "store.db", tmp_path / "audit.db"
    with open_store(db) as store:
        record_demo(store)
    port = _free_port()
    script = Path(sys.executable).parent / "convstore"
    args = [str(script), "--db", str(db), "--audit", str(audit), "audit", "serve", "-p", str(port)]
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{base}/-/versions.json")
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "datasette did not start"
                time.sleep(0.3)
        before = audit.read_bytes()
        missing = _get(f"{base}/audit/calls_without_result.json?_shape=array")
        assert [(row["call_id"], row["name"]) for row in missing] == [("call_3", "run_tests")]
        errors = _get(f"{base}/audit/errors_per_tool.json?_shape=array")
        assert {row["name"]: row["errors"] for row in errors}["git_diff"] == 1
        with pytest.raises(urllib.error.HTTPError):
            _get(f"{base}/audit.json?sql=DELETE+FROM+tool_calls")
        assert audit.read_bytes() == before
    finally:
        server.terminate()
        server.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:  # stopping convstore stopped Datasette: the port closes
        try:
            _get(f"{base}/-/versions.json")
        except (urllib.error.URLError, ConnectionError):
            break
        assert time.monotonic() < deadline, "Datasette outlived convstore"
        time.sleep(0.2)


class Server:
    """`convstore audit serve` on a free loopback port, as a real process."""

    def __init__(self, db: Path, audit: Path, *extra: str) -> None:
        self.port = _free_port()
        script = Path(sys.executable).parent / "convstore"
        args = [str(script), "--db", str(db), "--audit", str(audit), "audit", "serve"]
        self.process = subprocess.Popen(
            [*args, "-p", str(self.port), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{self.base}/-/versions.json")
            except (urllib.error.URLError, ConnectionError):
                if self.process.poll() is not None:
                    _, err = self.process.communicate()
                    pytest.fail(f"audit serve exited: {err.decode()}")
                assert time.monotonic() < deadline, "datasette did not start"
                time.sleep(0.3)
            else:
                return

    def status(self, path: str, host: str | None) -> int:
        """The HTTP status of GET ``path`` sent with this Host header (None: no Host at all)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.putrequest("GET", path, skip_host=True)
            if host is not None:
                conn.putheader("Host", host)
            conn.endheaders()
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()

    def stop(self) -> None:
        self.process.terminate()
        self.process.communicate(timeout=20)


@pytest.fixture
def demo_files(tmp_path: Path) -> tuple[Path, Path]:
    db, audit = tmp_path / "store.db", tmp_path / "audit.db"
    with open_store(db) as store:
        record_demo(store)
    return db, audit


@pytest.mark.slow
def test_audit_serve_answers_only_to_its_own_host_names(demo_files: tuple[Path, Path]) -> None:
    """Loopback names and --allow-host get 200; any other Host (DNS rebinding) gets 403."""
    server = Server(*demo_files, "--allow-host", "box.internal")
    try:
        port = server.port
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            assert server.status("/audit.json", host) == 200, host
        assert server.status("/audit.json", f"box.internal:{port}") == 200
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", ""):
            assert server.status("/audit.json", host) == 403, host
            assert server.status("/audit/calls_without_result.json", host) == 403, host
        assert server.status("/audit.json", None) in (400, 403)  # HTTP/1.1 needs a Host
    finally:
        server.stop()


@pytest.mark.slow
def test_audit_serve_runs_arbitrary_sql_only_when_allowed(demo_files: tuple[Path, Path]) -> None:
    """Without --allow-sql, ?sql= is refused (403) and canned queries work; with it, SQL runs."""
    query = "/audit.json?sql=SELECT+count(*)+AS+n+FROM+blocks&_shape=array"
    server = Server(*demo_files)
    try:
        assert server.status(query, f"127.0.0.1:{server.port}") == 403
        assert server.status("/audit/errors_per_tool.json", f"127.0.0.1:{server.port}") == 200
    finally:
        server.stop()
    server = Server(*demo_files, "--allow-sql")
    try:
        assert _get(f"{server.base}{query}")[0]["n"] > 0
    finally:
        server.stop()


@pytest.mark.slow
def test_audit_serve_shows_one_consistent_snapshot_while_project_rewrites(
    demo_files: tuple[Path, Path],
) -> None:
    """project keeps rewriting the audit file; every page served is whole and the same."""
    db, audit = demo_files
    server = Server(db, audit)
    url = f"{server.base}/audit/blocks.json?_shape=array&_size=max&_col=kind"
    try:
        first = _get(url)
        assert first
        for _ in range(6):
            with open_store(db) as store:
                for _ in range(4):
                    record_demo(store)
            project = subprocess.run(
                [
                    str(Path(sys.executable).parent / "convstore"),
                    "--db",
                    str(db),
                    "--audit",
                    str(audit),
                    "project",
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            assert project.returncode == 0, project.stderr
            assert _get(url) == first
    finally:
        server.stop()
