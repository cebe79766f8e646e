"""The lifecycle commands from the shell: rewind, its undo, and show with and without --all."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from convstore import open_store
from convstore.cli import cli
from tests.formats import events_of


def _run(db: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", db, *args])
    return result.exit_code, result.stdout, result.stderr


def test_rewind_show_all_log_and_undo(tmp_path: Path) -> None:
    """`rewind --to` withdraws later messages from show and replay; `show --all` marks them,
    `log` keeps them, and `rewind --undo` brings them back; show prints each message id."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        conv = store.new_conversation()
        first = store.append_message(conv, "user", [{"type": "text", "text": "kept words"}])
        later = store.append_message(conv, "assistant", [{"type": "text", "text": "gone words"}])
    code, out, err = _run(db, "rewind", str(conv), "--to", str(first))
    assert code == 0
    version = int(out)
    assert out == f"{version}\n"  # bare, for V=$(convstore rewind ...)
    assert err == f"undo: convstore rewind {conv} --undo {version}\n"
    code, shown, _ = _run(db, "show", str(conv))
    assert str(first) in shown
    assert "gone words" not in shown
    assert "1 message(s) withdrawn by a rewind not shown" in shown
    code, shown, _ = _run(db, "show", str(conv), "--all")
    assert "gone words" in shown
    assert f"withdrawn by a rewind · {later}" in shown
    _, replayed, _ = _run(db, "replay", str(conv))
    assert len(json.loads(replayed)["messages"]) == 1
    _, logged, _ = _run(db, "log", str(conv))
    assert "gone words" in logged
    assert '"rewound"' in logged
    code, out, err = _run(db, "rewind", str(conv), "--undo", str(version))
    assert (code, out, err) == (0, "", "")
    _, replayed, _ = _run(db, "replay", str(conv))
    assert len(json.loads(replayed)["messages"]) == 2
    code, _, err = _run(db, "rewind", str(conv), "--undo", str(version))
    assert code == 2
    assert "not a rewind in force" in err


def test_rewind_wants_exactly_one_target(tmp_path: Path) -> None:
    """Without --to, --all or --undo, or with two of them, rewind is a usage error (exit 2)."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "x"}])
        rewind_version = 2 + events_of(store)  # after the start and the message
    assert _run(db, "rewind", str(conv))[0] == 2
    assert _run(db, "rewind", str(conv), "--all", "--undo", "2")[0] == 2
    code, out, _ = _run(db, "rewind", str(conv), "--all")
    assert code == 0
    assert out == f"{rewind_version}\n"


def test_fork_prints_the_new_id_and_copies_up_to_the_message(tmp_path: Path) -> None:
    """`fork CONV --at MSG` prints a new conversation's id whose replay is the parent's up to
    MSG; an unknown MSG is exit 2."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        conv = store.new_conversation()
        first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
        store.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
    code, out, _ = _run(db, "fork", str(conv), "--at", str(first), "--title", "branch")
    assert code == 0
    fork = out.strip()
    _, replayed, _ = _run(db, "replay", fork)
    assert json.loads(replayed)["messages"] == [{"role": "user", "content": "one"}]
    code, _, err = _run(db, "fork", str(conv), "--at", fork)
    assert code == 2
    assert "cannot be forked at" in err


def test_unique_prefixes_resolve_and_ambiguous_ones_name_the_candidates(tmp_path: Path) -> None:
    """A unique prefix of a conversation or message id works wherever the id does; an
    ambiguous one is exit 2 naming the candidates; one that matches nothing is exit 2."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        conv = store.new_conversation(conversation_id="aaaa1111-0000-4000-8000-000000000001")
        store.new_conversation(conversation_id="aaaa2222-0000-4000-8000-000000000002")
        message = store.append_message(conv, "user", [{"type": "text", "text": "hi"}])
    code, out, _ = _run(db, "show", "aaaa1")
    assert code == 0
    assert str(message) in out
    code, _, err = _run(db, "show", "aaaa")
    assert code == 2
    assert "ambiguous" in err
    assert "aaaa1111-0000-4000-8000-000000000001" in err
    assert "aaaa2222-0000-4000-8000-000000000002" in err
    code, _, err = _run(db, "log", "bbbb")
    assert code == 2
    assert "no conversation id starts with 'bbbb'" in err
    code, out, _ = _run(db, "fork", "aaaa1", "--at", str(message)[:8])
    assert code == 0, out
    code, _, err = _run(db, "rewind", "aaaa1", "--to", "ffff")
    assert code == 2
    assert "no message id in that conversation starts with 'ffff'" in err


def test_start_opens_a_message_without_stdin(tmp_path: Path) -> None:
    """`start CONV --role ROLE` prints an open message's id; blocks then stream into it."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        conv = store.new_conversation()
    code, out, _ = _run(db, "start", str(conv)[:8], "--role", "assistant")
    assert code == 0
    message = out.strip()
    result = CliRunner().invoke(
        cli, ["--db", db, "add-block", str(conv), message[:6]], input='{"type":"text","text":"hi"}'
    )
    assert result.exit_code == 0, result.output
    assert _run(db, "end", str(conv), message)[0] == 0
    with open_store(db) as store:
        [recorded] = store.messages(conv)
    assert (str(recorded.message_id), recorded.status, recorded.role) == (
        message,
        "ended",
        "assistant",
    )
