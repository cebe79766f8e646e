"""`convstore audit serve`: the audit read model in a real Datasette, read-only."""

from __future__ import annotations

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
from convstore.demo import record_demo

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
