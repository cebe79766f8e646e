"""The web list: hosted calls counted as calls (and said to be hosted), whether the counts come
from the audit read model or from reading the conversation; a branch names its parent by the
parent's shown title, linking to it; a conversation with branches says how many. Over real
stores, through Starlette's TestClient."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import Store
from convstore.app.projector import audit_path
from convstore.audit.search import Counts, conversation_counts
from tests.test_export import HOSTED_ROUND
from tests.test_web import HOSTILE, assert_inert, client_for, project


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each backend."""
    if request.param == "sqlite":
        location = str(tmp_path / "list.db")
    else:
        location = request.getfixturevalue("postgres_url")
    with convstore.open_store(location) as opened:
        yield opened


def row_of(page: str, conversation: UUID) -> str:
    """The list row of ``conversation``."""
    found = re.search(rf"<tr><td><a class='conv' href='/c/{conversation}'>.*?</tr>", page)
    assert found is not None, f"no row for {conversation}"
    return found.group(0)


def mixed_round(store: Store) -> UUID:
    """A user question, a call the caller runs and its result, then an assistant turn with
    two calls the provider ran (``HOSTED_ROUND``): three calls, two of them hosted."""
    conv = store.new_conversation(title="walruses")
    store.append_message(conv, "user", [{"type": "text", "text": "Where do walruses live?"}])
    call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
    store.append_message(conv, "assistant", [call])
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "notes.txt"}
    store.append_message(conv, "user", [result])
    store.append_message(conv, "assistant", HOSTED_ROUND)
    return conv


def test_hosted_calls_count_as_calls_read_or_projected(store: Store) -> None:
    """The calls column counts the caller's call and the provider's two, and says two were
    hosted: read from the conversation before the audit read model holds it, and the same
    from the read model after; a conversation with only the caller's calls says nothing of
    hosting."""
    conv = mixed_round(store)
    plain = store.new_conversation(title="plain")
    store.append_message(
        plain, "assistant", [{"type": "tool_use", "id": "p", "name": "x", "input": {}}]
    )
    read = client_for(store).get("/").text
    assert "<td>4</td><td>3 <span class='meta'>(2 hosted)</span></td>" in row_of(read, conv)
    assert row_of(read, plain).endswith("<td>1</td><td>1</td></tr>")
    project(store)
    events = store.conversation_info(conv).events
    found = conversation_counts(audit_path(store), [conv, plain], store.identity)
    assert found[conv] == Counts(events=events, messages=4, calls=3, hosted=2)
    assert (found[plain].calls, found[plain].hosted) == (1, 0)
    projected = client_for(store).get("/").text
    assert "not in the audit read model yet" not in projected
    assert row_of(projected, conv) == row_of(read, conv)
    assert row_of(projected, plain) == row_of(read, plain)
    searched = client_for(store).get("/?q=walruses").text
    assert "3 <span class='meta'>(2 hosted)</span>" in searched


def test_a_branch_names_its_parent_and_a_parent_counts_its_branches(store: Store) -> None:
    """A fork's row links to its parent under the parent's title; a subagent's parent with no
    title is named by its first user text (escaped); each parent's row counts its branches;
    a parent that is gone is said to be."""
    titled = store.new_conversation(title=HOSTILE)
    point = store.append_message(titled, "user", [{"type": "text", "text": "hi"}])
    forks = [store.fork(titled, at=point), store.fork(titled, at=point)]
    untitled = store.new_conversation()
    store.append_message(untitled, "user", [{"type": "text", "text": "<b>Why</b>   is it red?"}])
    agent = store.fork(untitled, at=store.messages(untitled)[0].message_id)
    page = client_for(store).get("/").text
    assert_inert(page)
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    for fork in forks:
        assert f"↳ branch of <a href='/c/{titled}'>{escaped}</a>" in row_of(page, fork)
    assert "2 branches (subagents, forks)" in row_of(page, titled)
    shown = "“&lt;b&gt;Why&lt;/b&gt; is it red?”"
    assert f"↳ branch of <a href='/c/{untitled}'>{shown}</a>" in row_of(page, agent)
    assert "1 branch (subagents, forks)" in row_of(page, untitled)
    assert "branch (subagents" not in row_of(page, agent)
    assert [info.children for info in store.conversations()] == [2, 0, 0, 1, 0]
    store.erase(titled, reason="test: a parent erased")
    page = client_for(store).get("/").text
    assert "(not in this store: erased, or never copied)</a>" in row_of(page, forks[0])
