"""`convstore serve` shows what was recorded, not less (issue 22): hosted calls and their
results, the sources text cites, documents inside tool output, each message's model, tokens and
stop reason, a conversation's labels, source, times, parent and children; each result once; a
replay pane whose wire messages name the stored messages they are. Over real stores, through
Starlette's TestClient."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import Store
from convstore.convert.claude_code import histories_from_transcript
from tests.test_export import HOSTED_ROUND
from tests.test_source_times import SESSION, TEXT
from tests.test_web import assert_inert, client_for, links, wire_pane


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A SQLite file store (the facts test below runs on both backends)."""
    with convstore.open_store(tmp_path / "recorded.db") as opened:
        yield opened


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each backend."""
    if request.param == "sqlite":
        location = str(tmp_path / "recorded.db")
    else:
        location = request.getfixturevalue("postgres_url")
    with convstore.open_store(location) as opened:
        yield opened


def hosted_conversation(store: Store) -> UUID:
    """A user question and an assistant turn in which the provider searched the web and
    called an MCP server's tool, then answered citing its sources."""
    conv = store.new_conversation(title="walruses")
    store.append_message(conv, "user", [{"type": "text", "text": "Where do walruses live?"}])
    store.append_message(conv, "assistant", HOSTED_ROUND)
    return conv


def test_hosted_calls_sources_and_documents_show_on_the_page(store: Store) -> None:
    """A hosted call and its result are a tool call and result marked as run by the provider
    (the MCP server named), the provider's payload folded under "provider data", the cited
    sources a line of links after the text, a document inside a result shown as one."""
    conv = hosted_conversation(store)
    page = client_for(store).get(f"/c/{conv}").text
    assert_inert(page)
    assert page.count("<span class='badge b-hosted'>run by the provider</span>") == 1
    assert "<span class='badge b-hosted'>run by the provider, MCP server docs</span>" in page
    assert "Result (web_search, run by the provider) <span class='meta'>srvtoolu_1" in page
    assert "Error (search_docs, run by the provider) <span class='meta'>mcptoolu_1" in page
    assert page.count("<details class='provider-data'><summary>provider data</summary>") == 2
    assert "<details class='provider-data' open" not in page
    assert "EqAB" in page.split("<details class='provider-data'>")[2]  # kept, folded away
    assert (
        "<div class='meta sources'>Sources: <a href='https://en.wikipedia.org/wiki/Walrus' "
        "rel='noopener noreferrer nofollow'>Walrus (https://en.wikipedia.org/wiki/Walrus)</a>"
        "; Field notes</div>"
    ) in page
    assert "<summary>document walrus.txt (text/plain, 28 bytes)</summary>" in page


def test_a_tool_result_is_shown_once_where_it_was_recorded(store: Store) -> None:
    """The result's output appears once on the page, in its own message; its call carries
    the outcome as a link to it (before, the output showed under the call as well)."""
    conv = store.new_conversation()
    store.append_message(
        conv, "assistant", [{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]
    )
    results = store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": "only-once-7f3"}]
    )
    page = client_for(store).get(f"/c/{conv}").text
    assert page.count("only-once-7f3") == 1
    anchor = f"b-{results}-0"
    assert f"<a href='#{anchor}'><span class='badge b-ok'>ok</span></a>" in page
    section = page.split(f"id='m-{results}'")[1]
    assert section.index(f"id='{anchor}'") < section.index("only-once-7f3")


def test_imported_session_shows_times_metadata_source_parent_and_children(
    any_store: Store,
) -> None:
    """A Claude Code session with a subagent, imported: the page shows the session's start
    and each message's time as the source gave them (2025, not now), each assistant message's
    model, tokens and stop reason, the labels and source; the subagent's page links to its
    session, the session's page lists its subagent, and the list marks the branch."""
    main, agent = any_store.import_histories(histories_from_transcript(TEXT)).ids
    any_store.set_labels(main, {"team": "build"})
    client = client_for(any_store)
    page = client.get(f"/c/{main}").text
    assert "started 2025-03-04 10:00:00 UTC" in page
    assert f"imported from claude-code:{SESSION}" in page
    assert "team=build</a>" in page
    assert "2025-03-04 10:00:05 UTC" in page  # the answer's own time
    assert (
        "<div class='meta msg-meta'>claude-sonnet-4-5 · 10 input / 42 output / 7 cache read / "
        "3 cache write tokens · stop: tool_use · id msg_A"
    ) in page
    children = re.search(r"<div class='children'>(.*?)</div>", page)
    assert children is not None
    assert children.group(1).startswith("1 branch (subagents, forks): ")
    assert f"<a class='conv-link' href='/c/{agent}'>" in children.group(1)
    sub = client.get(f"/c/{agent}").text
    assert f"↳ branch of <a class='conv-link' href='/c/{main}'>" in sub
    assert "“Why is the build red?”" in sub  # the parent's shown title
    assert f"branch of <a href='/c/{main}'>" in client.get("/").text
    assert [child.id for child in any_store.children(main)] == [agent]
    assert any_store.children(agent) == []


def test_the_replay_pane_names_the_stored_message_of_each_wire_message(store: Store) -> None:
    """One wire message per stored message, each naming its message's section; the marker a
    history opening with the assistant gets names none; a withdrawn message is in no wire
    message; the Anthropic shape's system names the system messages it joins."""
    conv = store.new_conversation()
    system = store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}])
    opening = store.append_message(conv, "assistant", [{"type": "text", "text": "Hello."}])
    question = store.append_message(conv, "user", [{"type": "text", "text": "Hi?"}])
    taken = store.append_message(conv, "assistant", [{"type": "text", "text": "taken back"}])
    store.rewind(conv, to=question)
    client = client_for(store)
    body, owners = wire_pane(client.get(f"/c/{conv}/replay?shape=openai").text)
    assert body == store.replay(conv, shape="openai")
    assert owners == [f"m-{system}", "", f"m-{opening}", f"m-{question}"]
    pane = client.get(f"/c/{conv}/replay?shape=anthropic").text
    body, owners = wire_pane(pane)
    assert body == store.replay(conv, shape="anthropic")
    assert owners == ["", f"m-{opening}", f"m-{question}"]
    assert f"<div class='wire' data-for='m-{system}'><div class='meta'>system · " in pane
    assert f"m-{taken}" not in pane
    page = client.get(f"/c/{conv}").text
    for owner in (system, opening, question, taken):
        assert f"id='m-{owner}'" in page  # what a wire message names is on the page


HOSTILE = "<script>alert(1)</script>'\"><img src=x onerror=alert(2)>"


def test_every_new_field_renders_inert(store: Store) -> None:
    """Markup in labels, source, a parent's title, model names, stop reasons, extras, hosted
    names and servers, provider data and annotations (titles and urls) shows as text; a
    ``javascript:`` or ``data:`` url is never made a link."""
    parent = store.new_conversation(title=HOSTILE)
    conv = store.new_conversation(title="child", parent_id=parent, source=HOSTILE)
    store.set_labels(conv, {"k": HOSTILE})
    store.append_message(
        conv,
        "assistant",
        [
            {
                "type": "hosted_tool_use",
                "id": HOSTILE,
                "name": HOSTILE,
                "server": HOSTILE,
                "input": {"q": HOSTILE},
                "provider_data": {"html": HOSTILE},
            },
            {
                "type": "hosted_tool_result",
                "tool_use_id": HOSTILE,
                "content": [{"type": "document", "text": HOSTILE, "name": HOSTILE}],
                "provider_data": {"html": HOSTILE},
            },
            {
                "type": "text",
                "text": "cited",
                "annotations": [
                    {"type": "url_citation", "url": "javascript:alert(3)", "title": HOSTILE},
                    {"type": "url_citation", "url": "JaVaScRiPt:alert(4)", "title": "t2"},
                    {"type": "url_citation", "url": "data:text/html,<script>x</script>"},
                    {"type": "url_citation", "url": "https://ok.example/?q='\"<>", "title": "ok"},
                ],
            },
        ],
        meta={
            "model": HOSTILE,
            "stop_reason": HOSTILE,
            "provider_message_id": HOSTILE,
            "extra": {"x": HOSTILE},
        },
    )
    client = client_for(store)
    for path in (f"/c/{conv}", f"/c/{conv}/side", f"/c/{parent}", "/", f"/?label=k={HOSTILE}"):
        page = client.get(path).text
        assert_inert(page)
        assert "<script>alert(1)" not in page, path
        assert "onerror=alert(2)>" not in page, path
        assert not [link for link in links(page) if "javascript" in link.lower()], path
        assert not [link for link in links(page) if link.startswith("data:text")], path
    page = client.get(f"/c/{conv}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "href='https://ok.example/?q=&#x27;&quot;&lt;&gt;'" in page
    assert "javascript:alert(3)" in page  # shown as text, not linked


def test_a_real_session_links_its_subagents_and_shows_each_result_once(
    corpus_dir: Path, store: Store
) -> None:
    """A captured Claude Code session whose Task subagents sit inline in the same file: the
    session's page lists every subagent conversation the import made, each links back, and
    no tool result's output is shown twice (under its call and in its message, as before)."""
    text = (
        corpus_dir / "claude-code/ccviewer-5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
    ).read_text()
    main, *agents = store.import_histories(histories_from_transcript(text)).ids
    assert agents, "the session has inline sidechains"
    client = client_for(store)
    page = client.get(f"/c/{main}").text
    assert_inert(page)
    for agent in agents:
        assert f"<a class='conv-link' href='/c/{agent}'>" in page
        assert (
            f"↳ branch of <a class='conv-link' href='/c/{main}'>" in client.get(f"/c/{agent}").text
        )
    assert page.count("<details class='tool-result'") == sum(
        1 for m in store.messages(main) for b in m.blocks if b.block.type == "tool_result"
    )
    assert page.count("<details class='tool-call'") == sum(
        1 for m in store.messages(main) for b in m.blocks if b.block.type == "tool_use"
    )
    assert "no result" not in page  # every call there was answered, and links to its answer
    assert "<div class='meta msg-meta'>claude-" in page  # the recorded model, per message


LABEL = re.compile(r"<div class='wire' data-for='[^']*'><div class='meta'>([^<]*)</div>")
BAR_LABEL = re.compile(r"<text x='0' y='\d+'>([^<]*)</text>")


def test_the_page_counts_messages_from_1_everywhere(store: Store) -> None:
    """Issue 39 item 22: the transcript, the replay pane's wire messages and the pressure
    chart all count from 1 (as `show` does), and a wire message names the transcript number
    of the stored message it is. Wire numbers are replay order with system messages
    included, as `convstore pressure` counts, in both shapes."""
    conv = store.new_conversation()
    system = store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}])
    opening = store.append_message(conv, "assistant", [{"type": "text", "text": "Hello."}])
    question = store.append_message(conv, "user", [{"type": "text", "text": "Hi?"}])
    store.append_message(conv, "assistant", [{"type": "text", "text": "taken back"}])
    store.rewind(conv, to=question)
    answer = store.append_message(conv, "assistant", [{"type": "text", "text": "Hi."}])
    client = client_for(store)
    page = client.get(f"/c/{conv}").text
    for number, message in ((1, system), (2, opening), (3, question), (5, answer)):
        assert re.search(rf"id='m-{message}'><div class='meta'>#{number} <b>", page)
    openai = LABEL.findall(client.get(f"/c/{conv}/replay?shape=openai").text)
    assert openai == [
        f"wire #1 · system · stored message {system} (#1 in the transcript)",
        "wire #2 · user · added by replay: no stored message",
        f"wire #3 · assistant · stored message {opening} (#2 in the transcript)",
        f"wire #4 · user · stored message {question} (#3 in the transcript)",
        f"wire #5 · assistant · stored message {answer} (#5 in the transcript)",
    ]
    anthropic = LABEL.findall(client.get(f"/c/{conv}/replay?shape=anthropic").text)
    assert anthropic == [
        f"system · wire #1 · stored message {system} (#1 in the transcript)",
        *openai[1:],
    ]
    for shape in ("openai", "anthropic"):
        chart = client.get(f"/c/{conv}/pressure?shape={shape}").text
        by_message = chart[chart.index("tokens by wire message") :]
        assert BAR_LABEL.findall(by_message) == [
            "#1 system",
            "#2 user",
            "#3 assistant",
            "#4 user",
            "#5 assistant",
        ]


def test_the_replay_pane_shows_each_wire_message_as_text(any_store: Store) -> None:
    """Issue 39 item 23: a wire message shows as its text (newlines as lines, quotes as
    quotes, markup escaped), not JSON-escaped; its JSON as sent is folded in a <details>;
    an image shows as a note naming it, not base64."""
    from convstore.app.demo import tiny_png  # noqa: PLC0415

    conv = any_store.new_conversation()
    prose = 'He said "go".\nThen <b>left</b> & right.'
    any_store.append_message(conv, "user", [{"type": "text", "text": prose}])
    png = base64.b64encode(tiny_png()).decode()
    image = {"type": "image", "media_type": "image/png", "data": png}
    any_store.append_message(conv, "user", [{"type": "text", "text": "Look:"}, image])
    client = client_for(any_store)
    shown = html.escape(prose, quote=True)
    for shape in ("openai", "anthropic"):
        pane = client.get(f"/c/{conv}/replay?shape={shape}&vision=1").text
        texts = re.findall(r"<pre class='wire-text'>(.*?)</pre>", pane, re.DOTALL)
        assert texts[0] == shown
        assert texts[1] == "Look:\n\n[image: image/png]"
        assert png not in "".join(texts)
        assert "\\n" not in texts[0]
        assert "\\&quot;" not in texts[0]
        # The JSON as sent is one click away (and is the replay itself).
        assert pane.count("<details class='wire-json'><summary>JSON as sent</summary>") == 2
        body, _ = wire_pane(pane)
        assert body == any_store.replay(conv, shape=shape, vision=True)
