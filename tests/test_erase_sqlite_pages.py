"""Erased text leaves every SQLite file even on a build whose default is ``secure_delete=OFF``.

Debian's SQLite is built with ``SQLITE_SECURE_DELETE``; SQLite's own default build is not. To
stand for the default build, the scenario runs in a subprocess whose ``sqlite3.connect`` turns
``secure_delete`` off on every new connection (real SQLite, real convstore: nothing mocked). Any
connection convstore writes through must then turn it back on itself, or the rows an update
replaced (replay model heads, audit blocks, listing rows) stay in the files' free pages, where a
later erasure's secure delete never reaches them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SECRET = "zebra-passport-X93KQ7"  # noqa: S105 - the bytes grep looks for

DEFAULT_BUILD = textwrap.dedent(
    """
    import sqlite3
    _connect = sqlite3.connect
    def _default_build(*args, **kwargs):
        conn = _connect(*args, **kwargs)
        conn.execute("PRAGMA secure_delete = OFF")
        return conn
    sqlite3.connect = _default_build
    """
)
"""What makes every new connection of the subprocess behave like SQLite's default build."""

SCENARIO = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from convstore import open_store
    from convstore.projector import catch_up, open_audit

    db, audit_path, secret = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    with open_store(db) as store:
        conv = store.new_conversation(title=f"{secret} title")
        kept = store.new_conversation(title="kept")
        audit = open_audit(store, audit_path)
        for n in range(40):
            store.set_labels(conv, {"case": f"{secret} label {n}"})
            store.append_message(conv, "user", [{"type": "text", "text": f"{secret} #{n}"}])
            store.append_message(
                conv,
                "assistant",
                [{"type": "tool_use", "id": f"t{n}", "name": "lookup",
                  "input": {"q": f"{secret} call {n}"}}],
            )
            store.append_message(
                conv, "user",
                [{"type": "tool_result", "tool_use_id": f"t{n}", "content": f"{secret} out {n}"}],
            )
            store.append_message(kept, "user", [{"type": "text", "text": f"plain {n}"}])
            store.replay(conv)  # the replay model rewrites its head row each time
            catch_up(store, audit)
        found = [p.name for p in (db, audit_path) if secret.encode() in p.read_bytes()]
        assert len(found) == 2, found  # the scenario did put the text in both files
        store.erase(conv, reason="user asked")
        catch_up(store, audit)
        audit.close()
        assert len(store.messages(kept)) == 40
    """
)


def _files(*paths: Path) -> list[Path]:
    return [
        candidate
        for path in paths
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    ]


def test_erased_text_leaves_store_and_audit_files_when_secure_delete_defaults_off(
    tmp_path: Path,
) -> None:
    """With ``secure_delete`` off on every new connection, a grep of the store, its WAL and the
    audit file (and its WAL) finds none of the erased text once erase and a catch-up ran."""
    db, audit = tmp_path / "s.db", tmp_path / "s.audit.db"
    subprocess.run(
        [sys.executable, "-c", DEFAULT_BUILD + SCENARIO, str(db), str(audit), SECRET],
        check=True,
        timeout=120,
    )
    leaked = [path.name for path in _files(db, audit) if SECRET.encode() in path.read_bytes()]
    assert leaked == []


def test_the_prelude_really_turns_secure_delete_off() -> None:
    """The stand-in for the default build works: a new connection reports secure_delete 0."""
    probe = "import sqlite3; print(sqlite3.connect(':memory:').execute('PRAGMA secure_delete')"
    probe += ".fetchone()[0])"
    out = subprocess.run(
        [sys.executable, "-c", DEFAULT_BUILD + probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert out.strip() == "0"
