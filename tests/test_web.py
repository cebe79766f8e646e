"""`convstore serve` over HTTP (Starlette's TestClient) and `export --format html`."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from uuid import UUID

import pytest
from click.testing import CliRunner

import convstore
from convstore import Store
from convstore.app.demo import record_demo, tiny_png
from convstore.app.projector import audit_path, catch_up, open_audit, rebuild
from convstore.cli import cli
from tests.formats import events_of

pytest.importorskip("starlette", reason="the web extra (Starlette) is not installed")
from starlette.testclient import TestClient

from convstore.cli.serve import HostGuard, allowed_hosts
from convstore.views.html import PAGE_SIZE, TEXT_LIMIT
from convstore.web import app as web_app
from convstore.web.app import create_app

PNG = base64.b64encode(tiny_png()).decode()
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
JS_LINK = '<a href="javascript:alert(3)">click</a> javascript:alert(4)'


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each backend (PostgreSQL through the conftest schema fixture)."""
    if request.param == "sqlite":
        location = str(tmp_path / "web.db")
    else:
        location = request.getfixturevalue("postgres_url")
    with convstore.open_store(location) as opened:
        yield opened


def client_for(store: Store) -> TestClient:
    app = HostGuard(create_app(store), allowed_hosts("127.0.0.1", ()), "convstore serve")
    return TestClient(app, base_url="http://127.0.0.1:8002")


def hostile(store: Store) -> UUID:
    """A conversation written to break a page: markup everywhere, huge text, a dead image."""
    conv = store.new_conversation(title=HOSTILE)
    store.append_message(
        conv,
        "user",
        [
            {"type": "text", "text": HOSTILE + JS_LINK},
            {"type": "text", "text": "x" * 100_000 + "<script>late()</script>"},
            {"type": "image", "url": "https://invalid.invalid/broken.png"},
            {"type": "image", "media_type": "image/png", "data": PNG},
        ],
    )
    store.append_message(
        conv,
        "assistant",
        [
            {"type": "reasoning", "text": HOSTILE},
            {
                "type": "tool_use",
                "id": 'c1"><script>',
                "name": "<script>x",
                "input": {"q": HOSTILE},
            },
            {"type": "tool_use", "id": "c2", "name": "never", "input": "raw <b>text</b>"},
        ],
    )
    store.append_message(
        conv,
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": 'c1"><script>',
                "content": "<script>" * 10 + "y" * 5_000_000,
                "is_error": True,
            }
        ],
    )
    return conv


def script_tags(page: str) -> list[str]:
    return re.findall(r"<script[^>]*>", page, flags=re.IGNORECASE)


def links(page: str) -> list[str]:
    return re.findall(r"""\b(?:href|src|action)\s*=\s*['"]([^'"]*)""", page, flags=re.IGNORECASE)


class _Tags(HTMLParser):
    """Collects every attribute of every tag as a browser's tokenizer reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(tag, name) for name, _ in attrs]


def handler_attributes(page: str) -> list[tuple[str, str]]:
    """The (tag, attribute) pairs of a page whose attribute is an event handler (on…)."""
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return [(tag, name) for tag, name in parser.found if name.lower().startswith("on")]


def assert_inert(page: str) -> None:
    assert script_tags(page) in ([], ["<script src='/static/app.js' defer>"]), script_tags(page)
    for link in links(page):
        assert link.startswith(("/", "?", "http://", "https://", "data:image/", "#b-")), link
        # A link within the page names a block by its message's id and place, not by any
        # recorded text.
        assert not link.startswith("#") or re.fullmatch(r"#b-[0-9a-f-]{36}-\d+", link), link
    # No real tag carries an event handler (recorded "onerror=" shows as escaped text only).
    assert handler_attributes(page) == []
    assert "onerror=alert(2)>" not in page


WIRE = re.compile(
    r"<div class='wire' data-for='([^']*)'><div class='meta'>([^<]*)</div>"
    r"<pre class='wire-text'>.*?</pre><details class='wire-json'><summary>JSON as sent</summary>"
    r"<pre>(.*?)</pre></details></div>",
    re.DOTALL,
)


def wire_pane(pane: str) -> tuple[dict[str, object], list[str]]:
    """The replay pane read back: the request body its wire messages make (from the JSON as
    sent that each folds away), and per entry of ``messages`` the transcript sections
    (``m-ID``) it names, space-separated."""
    body: dict[str, object] = {}
    messages: list[object] = []
    owners: list[str] = []
    for owners_of, label, text in WIRE.findall(pane):
        value = json.loads(html.unescape(text))
        if label.startswith("system"):
            body["system"] = value
        else:
            messages.append(value)
            owners.append(owners_of)
    body["messages"] = messages
    return body, owners


def test_list_and_conversation_pages(store: Store) -> None:
    """The list shows title, counts and a link; the page shows every block kind of the demo."""
    conv = record_demo(store)
    client = client_for(store)
    listing = client.get("/")
    assert listing.status_code == 200
    assert f"/c/{conv}" in listing.text
    info = next(c for c in store.conversations() if c.id == conv)
    assert (info.title or "") in listing.text
    calls = sum(1 for m in store.messages(conv) for b in m.blocks if b.block.type == "tool_use")
    assert f"<td>{len(store.messages(conv))}</td><td>{calls}</td>" in listing.text
    page = client.get(f"/c/{conv}")
    assert page.status_code == 200
    for marker in ("tool call", "tool result", "<details class='reasoning'>", "data:image/png"):
        assert marker in page.text, marker
    assert "interrupted" in page.text or "no result" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    assert "'unsafe-inline'" not in page.headers["content-security-policy"]


def test_side_pane_is_the_replay_itself(store: Store) -> None:
    """replay.json is Store.replay for the query's options; the side pane shows the same JSON."""
    conv = record_demo(store)
    client = client_for(store)
    for query, options in [
        ("shape=anthropic&vision=0", {"shape": "anthropic", "vision": False}),
        (
            "shape=openai&vision=1&full=1&keep=0",
            {"vision": True, "full": True, "keep_tool_results": 0},
        ),
    ]:
        got = client.get(f"/c/{conv}/replay.json?{query}").json()
        assert got == store.replay(conv, **options)  # type: ignore[arg-type]
    side = client.get(f"/c/{conv}/side?vision=0").text
    assert "[Image not shown" in side
    assert "Context pressure" in side
    assert "<svg" in side
    total = store.pressure(conv, vision=False).total
    assert f"{total:,} tokens" in side
    # The page loads the same two parts one after the other: the replay, then the chart.
    replay_part = client.get(f"/c/{conv}/replay?vision=0").text
    pressure_part = client.get(f"/c/{conv}/pressure?vision=0").text
    assert side == replay_part + pressure_part
    assert wire_pane(replay_part)[0] == store.replay(conv, vision=False)
    anthropic = client.get(f"/c/{conv}/replay?shape=anthropic&vision=1").text
    assert wire_pane(anthropic)[0] == store.replay(conv, shape="anthropic", vision=True)
    page = client.get(f"/c/{conv}?vision=0").text
    assert f"data-src='/c/{conv}/replay?shape=openai&amp;vision=0'" in page
    assert f"data-src='/c/{conv}/pressure?shape=openai&amp;vision=0'" in page


def test_the_page_replays_with_the_defaults_of_convstore_replay(
    store: Store, tmp_path: Path
) -> None:
    """With no query parameters the page, its side pane and replay.json show exactly what
    `convstore replay CONV` prints (vision off, as everywhere), the vision box unchecked."""
    conv = record_demo(store)
    client = client_for(store)
    db = tmp_path / "cli.db"
    with convstore.open_store(db) as other:
        other.load(store.dump())
    printed = CliRunner().invoke(cli, ["--db", str(db), "replay", str(conv)])
    assert printed.exit_code == 0, printed.stderr
    assert client.get(f"/c/{conv}/replay.json").json() == json.loads(printed.stdout)
    assert wire_pane(client.get(f"/c/{conv}/side").text)[0] == json.loads(printed.stdout)
    page = client.get(f"/c/{conv}").text
    assert f"data-src='/c/{conv}/replay?shape=openai&amp;vision=0'" in page
    assert "name='vision' value='1'>" in page  # the box, not checked


def test_compaction_and_rewind_are_marked(store: Store) -> None:
    """A compaction boundary shows its summary; withdrawn and open messages are marked."""
    conv = store.new_conversation(title="marks")
    first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
    store.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
    store.compact(conv, "the summary <b>so far</b>", through=first)
    kept = store.append_message(conv, "user", [{"type": "text", "text": "three"}])
    store.append_message(conv, "assistant", [{"type": "text", "text": "taken back"}])
    store.rewind(conv, to=kept)
    store.start_message(conv, "assistant")
    page = client_for(store).get(f"/c/{conv}").text
    assert "the summary &lt;b&gt;so far&lt;/b&gt;" in page
    assert page.index("one") < page.index("class='compaction'") < page.index("two")
    assert "withdrawn by a rewind" in page
    assert "open (not ended)" in page


def test_hostile_transcript_renders_inert(store: Store) -> None:
    """Script tags, javascript: links, a 100 KB line and 5 MB of output render as dead text."""
    conv = hostile(store)
    client = client_for(store)
    page = client.get(f"/c/{conv}")
    assert page.status_code == 200
    assert_inert(page.text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "more characters not shown" in page.text
    assert len(page.text) < 1_000_000  # the 5 MB output is cut on the page
    assert "https://invalid.invalid/broken.png" in page.text
    assert "<span class='badge b-error'>error</span>" in page.text
    assert "b-noresult" in page.text  # c2 never got a result
    for path in ("/", f"/c/{conv}/side?vision=0", f"/c/{conv}/transcript"):
        response = client.get(path)
        assert response.status_code == 200
        assert script_tags(response.text) in ([], ["<script src='/static/app.js' defer>"])
        assert_inert(response.text)


def test_transcript_is_paged(tmp_path: Path) -> None:
    """A long conversation opens at its newest page; "load earlier" walks back to the first,
    numbered once the audit read model knows where the page starts."""
    with convstore.open_store(tmp_path / "long.db") as store:
        conv = store.new_conversation(title="long")
        count = PAGE_SIZE * 2 + 10
        for i in range(count):
            store.append_message(conv, "user", [{"type": "text", "text": f"message {i}"}])
        client = client_for(store)
        newest = client.get(f"/c/{conv}").text
        assert f"message {count - 1}<" in newest
        assert f"message {count - PAGE_SIZE}<" in newest
        assert f"message {count - PAGE_SIZE - 1}<" not in newest
        assert "data-last='1'" in newest
        assert "#1 " not in newest  # where the page starts is not known without the audit
        earlier = re.findall(r"class='earlier' href='([^']+)'", newest)
        assert len(earlier) == 1
        middle = client.get(earlier[0].replace("&amp;", "&")).text
        assert f"message {count - PAGE_SIZE - 1}<" in middle
        assert "message 9<" not in middle
        assert "message 10<" in middle
        assert "data-last='0'" in middle
        assert "class='newest'" in middle
        first_href = re.findall(r"class='earlier' href='([^']+)'", middle)[0]
        first = client.get(first_href.replace("&amp;", "&")).text
        assert "message 0<" in first
        assert "message 10<" not in first
        assert "class='earlier'" not in first
        assert "#1 " in first  # the page starting the conversation is numbered
        assert f"of {count}" in first
        audit = open_audit(store, audit_path(store))
        catch_up(store, audit)
        audit.close()
        numbered = client.get(f"/c/{conv}").text
        assert f"#{count - PAGE_SIZE + 1} " in numbered
        assert f"messages {count - PAGE_SIZE + 1} to {count} of {count}" in numbered
        assert client.get(f"/c/{conv}?before=x").status_code == 400
        assert client.get(f"/c/{conv}?before=0").status_code == 400
        for bad in ("vision=2", "vision=yes", "full=true", "shape=gemini", "keep=-1"):
            assert client.get(f"/c/{conv}/replay?{bad}").status_code == 400, bad
        assert client.get(f"/c/{conv}/replay?vision=0&vision=1&full=0").status_code == 200


def test_version_moves_when_messages_are_appended(store: Store) -> None:
    """The polling endpoint reports a new version after an append, and the fragment shows it."""
    conv = store.new_conversation(title="live")
    client = client_for(store)
    before = client.get(f"/c/{conv}/version").json()["version"]
    store.append_message(conv, "user", [{"type": "text", "text": "fresh news"}])
    after = client.get(f"/c/{conv}/version").json()["version"]
    assert after > before
    assert "fresh news" in client.get(f"/c/{conv}/transcript").text


def test_read_only_and_host_checked(store: Store) -> None:
    """Writes get 405, a foreign Host header 403, an unknown conversation 404."""
    conv = record_demo(store)
    client = client_for(store)
    before = store.log_position()
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert client.request(method, f"/c/{conv}").status_code == 405
    assert client.head(f"/c/{conv}").status_code == 200
    assert store.log_position() == before
    rebound = client.get("/", headers={"Host": "evil.example:8002"})
    assert rebound.status_code == 403
    for host in ("localhost:8002", "127.0.0.1", "[::1]:8002"):
        assert client.get("/", headers={"Host": host}).status_code == 200
    assert client.get("/c/00000000-0000-0000-0000-000000000000").status_code == 404
    assert client.get("/c/not-an-id").status_code == 404


def export_html(store_location: str, conv: UUID, *extra: str) -> str:
    result = CliRunner().invoke(
        cli, ["--db", store_location, "export", str(conv), "--format", "html", *extra]
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_export_html_is_self_contained(tmp_path: Path) -> None:
    """The exported file holds every message, the replay and the pressure, needs no network
    and runs no script, even for a hostile transcript."""
    db = tmp_path / "export.db"
    with convstore.open_store(db) as store:
        conv = hostile(store)
        demo = record_demo(store)
        wanted = store.replay(demo, vision=True)
    page = export_html(str(db), conv)
    assert script_tags(page) == []
    assert "<link" not in page
    for link in links(page):
        assert link.startswith(("data:image/", "https://invalid.invalid/", "#b-")), link
    assert "Content-Security-Policy" in page
    assert "<style>" in page
    demo_page = export_html(str(db), demo, "--vision")
    assert wire_pane(demo_page)[0] == wanted
    assert len(json.dumps(wanted, ensure_ascii=False, indent=2)) < TEXT_LIMIT
    out = tmp_path / "demo.html"
    export_html(str(db), demo, "--output", str(out))
    assert out.read_text().startswith("<!doctype html>")


def test_serve_help_says_who_can_read() -> None:
    """`serve --help` names the audience and the Host check."""
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0
    assert "anyone who can connect" in result.stdout
    assert "403" in result.stdout


def project(store: Store) -> None:
    """Catch the store's audit read model (at its default path) up with the log."""
    audit = open_audit(store, audit_path(store))
    try:
        catch_up(store, audit)
    finally:
        audit.close()


def listed_ids(page: str) -> list[str]:
    return re.findall(r"<a class='conv' href='/c/([0-9a-f-]{36})'", page)


def test_list_is_filtered_and_paged_by_the_listing_index(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Title, label and activity filters in the query string pick what the listing index
    picks; the next-page cursor keeps the filters; the form shows them."""
    monkeypatch.setattr(web_app, "LIST_PAGE_SIZE", 2)
    made = []
    for i in range(5):
        conv = store.new_conversation(title=f"report {i}" if i % 2 == 0 else f"chat {i}")
        store.set_labels(conv, {"team": "red" if i < 3 else "blue", "n": str(i)})
        store.append_message(conv, "user", [{"type": "text", "text": f"hello {i}"}])
        made.append(str(conv))
    client = client_for(store)
    first = client.get("/").text
    assert listed_ids(first) == made[::-1][:2]  # newest activity first, two a page
    walked = listed_ids(first)
    page = first
    while nxt := re.findall(r"class='next' href='/\?([^']+)'", page):
        page = client.get("/?" + nxt[0].replace("&amp;", "&")).text
        walked += listed_ids(page)
    assert walked == made[::-1]
    red = client.get("/?label=team%3Dred").text
    assert listed_ids(red) == made[2:0:-1]
    assert "label=team%3Dred" in red  # the next link keeps the filter
    assert "value='team=red'" in red  # and the form shows it
    nxt = re.findall(r"class='next' href='/\?([^']+)'", red)[0].replace("&amp;", "&")
    assert listed_ids(client.get("/?" + nxt).text) == made[:1]
    both = client.get("/?label=team%3Dred&title=REPORT").text
    assert listed_ids(both) == [made[2], made[0]]
    assert listed_ids(client.get("/?label=team%3Dred&label=n%3D1").text) == [made[1]]
    assert listed_ids(client.get("/?active_after=2999-01-01").text) == []
    everything = store.list_conversations(limit=10).conversations
    middle = everything[2].last_active
    assert middle is not None
    stamp = middle.isoformat().replace("+", "%2B")
    assert listed_ids(client.get(f"/?active_before={stamp}").text) == made[:2][::-1]
    assert client.get("/?active_after=yesterday").status_code == 400
    assert client.get("/?label=nokey").status_code == 400
    assert client.get("/?after=junk").status_code == 400
    hostile_page = client.get("/?title=%3Cscript%3E&label=team%3D%22%3E%3Cb%3E")
    assert hostile_page.status_code == 200
    assert_inert(hostile_page.text)
    assert "value='&lt;script&gt;'" in hostile_page.text
    refused = client.get("/?label=%3Cb%3E%3D%22x")
    assert refused.status_code == 400
    assert_inert(refused.text)
    assert "&lt;b&gt;" in refused.text


def test_search_finds_ranked_messages_with_escaped_snippets(store: Store) -> None:
    """Search reads the audit read model's full-text index: conversations ranked, matching
    messages linked with an escaped snippet, filters applied, erased ones never shown."""
    plenty = store.new_conversation(title="plenty")
    store.set_labels(plenty, {"team": "red"})
    store.append_message(plenty, "user", [{"type": "text", "text": "zebra zebra zebra zebra"}])
    once = store.new_conversation(title="once")
    store.set_labels(once, {"team": "blue"})
    store.append_message(once, "user", [{"type": "text", "text": "a long text " * 40}])
    target = store.append_message(
        once, "assistant", [{"type": "text", "text": "one zebra <script>alert(1)</script>"}]
    )
    erased = store.new_conversation(title="gone")
    store.append_message(erased, "user", [{"type": "text", "text": "zebra secret"}])
    none = hostile(store)
    project(store)
    store.erase(erased, reason="test")  # the read model has not caught up with it yet
    client = client_for(store)
    page = client.get("/?q=zebra").text
    assert_inert(page)
    assert listed_ids(page) == [str(plenty), str(once)]
    assert "secret" not in page
    assert str(none) not in page
    assert "<mark>zebra</mark> &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert f"/c/{once}?before=" in page
    assert f"#m-{target}" in page
    assert "1 erasure is not applied" in page  # the read model has not seen it yet
    assert listed_ids(client.get("/?q=zebra&label=team%3Dblue").text) == [str(once)]
    assert listed_ids(client.get("/?q=zebra+script").text) == [str(once)]
    assert listed_ids(client.get("/?q=nothing-like-this").text) == []
    for query in ('"zebra', "zebra OR x", "NEAR(zebra", "*", "text:zebra", "-zebra"):
        response = client.get("/", params={"q": query})
        assert response.status_code == 200, query
    assert client.get("/", params={"q": "w " * 30}).status_code == 400
    typed = client.get("/", params={"q": HOSTILE})
    assert typed.status_code == 200
    assert_inert(typed.text)
    assert "value='&lt;script&gt;alert(1)&lt;/script&gt;" in typed.text
    found_hostile = client.get("/", params={"q": "script alert"}).text
    assert_inert(found_hostile)
    assert str(none) in listed_ids(found_hostile)
    assert len(found_hostile) < 200_000  # a snippet of the 5 MB output, not the output
    link = re.findall(r"class='hit' href='([^']+)'", page)[-1].replace("&amp;", "&")
    landed = client.get(link).text
    assert f"id='m-{target}'" in landed
    project(store)
    assert "Search index current" in client.get("/?q=zebra").text


def test_search_says_when_the_read_model_is_missing_or_behind(store: Store) -> None:
    """No read model: the page says so and gives the command; behind: by how much; a
    rebuild answers the same as the projection it replaces."""
    conv = store.new_conversation(title="notes")
    store.append_message(conv, "user", [{"type": "text", "text": "quokka sighting"}])
    client = client_for(store)
    missing = client.get("/?q=quokka").text
    assert "there is no audit read model at" in missing
    assert "project</code>" in missing
    assert listed_ids(missing) == []
    assert "there is no audit read model at" in client.get("/").text
    project(store)
    before = client.get("/?q=quokka").text
    assert listed_ids(before) == [str(conv)]
    store.append_message(conv, "user", [{"type": "text", "text": "second quokka"}])
    behind = client.get("/?q=quokka").text
    head = store.log_position()
    assert "positions behind" in behind
    assert f"of {head:,}" in behind
    assert "second" not in behind  # stale, and said so
    project(store)
    current = client.get("/?q=quokka").text
    assert "Search index current" in current
    assert "second <mark>quokka</mark>" in current
    rebuild(store, audit_path(store))
    assert client.get("/?q=quokka").text == current


def test_list_counts_come_from_the_read_model_when_whole(store: Store) -> None:
    """A conversation the read model holds whole is counted from it; a large one it does
    not is shown as unknown instead of read whole for a list."""
    conv = record_demo(store)
    messages = store.messages(conv)
    calls = sum(1 for m in messages for b in m.blocks if b.block.type == "tool_use")
    project(store)
    page = client_for(store).get("/").text
    assert f"<td>{len(messages)}</td><td>{calls}</td>" in page
    big = store.new_conversation(title="big")
    for i in range(web_app.READ_FOR_COUNTS // events_of(store) + 1):
        store.append_message(big, "user", [{"type": "text", "text": f"m{i}"}])
    page = client_for(store).get("/").text
    assert "not in the audit read model yet" in page
    project(store)
    page = client_for(store).get("/").text
    assert f"<td>{web_app.READ_FOR_COUNTS // events_of(store) + 1:,}</td><td>0</td>" in page


def test_a_search_ranks_every_match_and_pages_through_them(store: Store) -> None:
    """Every matching conversation is ranked, so a filter finds one whose match ranks below
    hundreds of better blocks (an earlier search ranked only the 500 best blocks, and answered
    "Nothing found" here); results page by LIST_PAGE_SIZE, each conversation once."""
    green = store.new_conversation(title="green")
    store.set_labels(green, {"team": "green"})
    store.append_message(green, "user", [{"type": "text", "text": "wombat " + "pad " * 300}])
    blue = []
    for i in range(web_app.LIST_PAGE_SIZE + 10):
        conv = store.new_conversation(title=f"blue {i}")
        store.set_labels(conv, {"team": "blue"})
        store.append_message(conv, "user", [{"type": "text", "text": f"wombat {i}"} for _ in "ab"])
        blue.append(str(conv))
    project(store)
    client = client_for(store)
    page = client.get("/?q=wombat&label=team%3Dgreen").text
    assert listed_ids(page) == [str(green)]
    assert "2 matching blocks" not in page
    assert "1 matching block<" in page
    first = client.get("/?q=wombat").text
    shown = listed_ids(first)
    assert len(shown) == web_app.LIST_PAGE_SIZE
    assert "more results" in first
    second = client.get(f"/?q=wombat&skip={web_app.LIST_PAGE_SIZE}").text
    rest = listed_ids(second)
    assert "more results" not in second
    assert sorted(shown + rest) == sorted([*blue, str(green)])
    assert rest[-1] == str(green)  # its one match, diluted by padding, ranks last
    assert client.get("/?q=wombat&skip=-1").status_code == 400


def test_a_nul_in_any_query_parameter_is_a_400_with_a_plain_message(store: Store) -> None:
    """NUL (%00) in a search, a filter, a cursor, a view option or a parameter's name: a 400
    page saying so, never a 500, with the read model in place so the search really runs."""
    conv = store.new_conversation(title="t")
    store.append_message(conv, "user", [{"type": "text", "text": "zebra"}])
    project(store)
    client = TestClient(
        HostGuard(create_app(store), allowed_hosts("127.0.0.1", ()), "convstore serve"),
        base_url="http://127.0.0.1:8002",
        raise_server_exceptions=False,
    )
    assert client.get("/?q=zebra").status_code == 200
    queries = [
        "q=%00",
        "q=zebra%00",
        "q=zebra&skip=%00",
        "title=%00",
        "label=team%3D%00",
        "after=%00",
        "active_after=2020-01-01%00",
        "%00=1",
    ]
    paths = [
        *(f"/?{query}" for query in queries),
        *(f"/c/{conv}{tail}?keep=%00" for tail in ("", "/transcript", "/side", "/replay.json")),
        f"/c/{conv}/version?x=%00",
    ]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 400, (path, response.status_code)
        assert "a query parameter holds a NUL character (%00)" in response.text, path
        assert_inert(response.text)
