"""`convstore serve` in a real browser: Debian's Chromium driven headless by Playwright."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import convstore
from convstore import Store
from convstore.app.demo import record_demo

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no browser: /usr/bin/chromium is absent (apt-get install chromium; CI does)",
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="the web extra (uvicorn) is not installed")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Served:
    """``convstore serve``'s app under a real uvicorn on 127.0.0.1, in a thread."""

    def __init__(self, store: Store) -> None:
        from convstore.cli.serve import HostGuard, allowed_hosts  # noqa: PLC0415
        from convstore.web.app import create_app  # noqa: PLC0415

        self.port = free_port()
        app = HostGuard(create_app(store), allowed_hosts("127.0.0.1", ()), "convstore serve")
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each backend."""
    if request.param == "sqlite":
        location = str(tmp_path / "browser.db")
    else:
        location = request.getfixturevalue("postgres_url")
    with convstore.open_store(location) as opened:
        yield opened


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium with no background networking (launch gives it a fresh profile)."""
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def test_browse_fold_vision_and_live(store: Store, browser: Any) -> None:
    """List, open, unfold a tool round, see vision off by default (the marker) and switch it
    on, and watch an appended message arrive within a second, with no console errors (CSP
    included)."""
    conv = record_demo(store)
    errors: list[str] = []
    with Served(store) as base:
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(base + "/")
        page.click(f"a[href='/c/{conv}']")
        page.wait_for_url(f"**/c/{conv}")
        call = page.locator("details.tool-call").first
        assert call.get_attribute("open") is None
        call.locator("summary").click()
        assert call.get_attribute("open") is not None
        assert call.locator("pre").first.is_visible()
        page.wait_for_selector("#side .replay")
        assert "[Image not shown" in page.inner_text("#side .replay")  # off, as replay's
        page.check("#vision")
        page.click("#apply")
        page.wait_for_url("**vision=1**")
        page.wait_for_selector("#side .replay")
        assert "[Image not shown" not in page.inner_text("#side .replay")
        page.wait_for_selector("#pressure svg")
        store.append_message(conv, "user", [{"type": "text", "text": "arrived live"}])
        # The open page shows it without a reload (how soon is bench/web.py's to measure).
        page.wait_for_selector("text=arrived live", timeout=10000)
    assert errors == []


def test_search_and_open_a_result(store: Store, browser: Any) -> None:
    """Type words in the list's search box, see the ranked result with its highlighted
    snippet, click it, and land on the page of that message, scrolled to it."""
    from convstore.app.projector import audit_path, catch_up, open_audit  # noqa: PLC0415

    record_demo(store)
    conv = store.new_conversation(title="needle haystack")
    for i in range(300):  # the match is well before the newest page
        text = "the walrus <b>surfaced</b>" if i == 20 else f"filler {i}"
        message = store.append_message(conv, "user", [{"type": "text", "text": text}])
        if i == 20:
            target = message
    audit = open_audit(store, audit_path(store))
    catch_up(store, audit)
    audit.close()
    errors: list[str] = []
    with Served(store) as base:
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(base + "/")
        assert "Search index current" in page.inner_text("#audit-note")
        page.fill("#q", "walrus surfaced")
        page.click("#go")
        page.wait_for_selector("#results a.hit")
        assert page.inner_text("#results a.conv") == "needle haystack"
        assert page.inner_text("#results mark") == "walrus"
        assert "<b>surfaced</b>" in page.inner_text("#results .snippet")  # shown, not parsed
        page.click("#results a.hit")
        page.wait_for_url(f"**/c/{conv}?before=*")
        found = page.locator(f"#m-{target}")
        assert "walrus" in found.inner_text()
        assert found.is_visible()
        box = found.bounding_box()
        assert box is not None
        assert 0 <= box["y"] < page.viewport_size["height"]
        page.click("a.newest")
        page.wait_for_selector("text=filler 299")
    assert errors == []


def test_selecting_a_message_shows_its_wire_message(store: Store, browser: Any) -> None:
    """Click a message: it and the one wire message replay made of it are selected, the
    wire message scrolled into view and naming the message; click a wire message and its
    message is selected. A hosted round shows its mark and its cited source as a link."""
    from tests.test_export import HOSTED_ROUND  # noqa: PLC0415

    conv = store.new_conversation(title="lined up")
    store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}])
    question = store.append_message(conv, "user", [{"type": "text", "text": "Walrus home?"}])
    answer = store.append_message(conv, "assistant", HOSTED_ROUND)
    errors: list[str] = []
    with Served(store) as base:
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{base}/c/{conv}?shape=anthropic")
        page.wait_for_selector("#replay .wire")
        assert page.locator(".wire.selected").count() == 0
        page.click(f"#m-{answer} pre.text")
        wire = page.locator(".wire.selected")
        assert wire.count() == 1
        assert f"stored message {answer}" in wire.inner_text()
        assert "run by the provider" in wire.inner_text()  # the hosted round's prose
        assert "[Sources: Walrus (https://en.wikipedia.org/wiki/Walrus)" in wire.inner_text()
        assert wire.is_visible()
        assert "selected" in (page.get_attribute(f"#m-{answer}", "class") or "")
        page.click(f"#replay .wire[data-for='m-{question}'] pre")
        assert "selected" in (page.get_attribute(f"#m-{question}", "class") or "")
        assert "selected" not in (page.get_attribute(f"#m-{answer}", "class") or "")
        assert page.locator(f"#m-{answer} .b-hosted").count() == 2  # the two calls
        link = page.locator(f"#m-{answer} .sources a")
        assert link.get_attribute("href") == "https://en.wikipedia.org/wiki/Walrus"
    assert errors == []


def test_narrow_window_stacks_the_columns_and_the_form_sends_one_vision(
    store: Store, browser: Any, tmp_path: Path
) -> None:
    """Issue 39 item 23: at 420 px the replay pane stacks under the transcript (full width)
    instead of squeezing beside it, while at desktop width it stays beside it; a wire
    message reads as text with its JSON one click away; applying the form never puts two
    ``vision`` values in the URL (``vision=1`` when ticked, none when clear: off)."""
    from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415

    conv = record_demo(store)
    errors: list[str] = []
    with Served(store) as base:
        page = browser.new_page(viewport={"width": 420, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.goto(f"{base}/c/{conv}")
        page.wait_for_selector("#pressure svg")
        transcript = page.locator("#transcript").bounding_box()
        side = page.locator("#side").bounding_box()
        assert transcript is not None
        assert side is not None
        assert side["y"] >= transcript["y"] + transcript["height"] - 1  # below, not beside
        assert side["width"] > 300
        assert transcript["width"] > 300
        page_width = page.evaluate("document.documentElement.scrollWidth")
        assert page_width <= 420  # nothing wider than the window: no sideways scrolling
        page.screenshot(path=str(tmp_path / "narrow.png"), full_page=True)
        wire = page.locator("#replay .wire").nth(1)
        assert "\\n" not in wire.locator("pre.wire-text").inner_text()
        raw = wire.locator("details.wire-json pre")
        assert not raw.is_visible()
        wire.locator("details.wire-json summary").click()
        assert raw.is_visible()
        assert raw.inner_text().lstrip().startswith("{")

        page.set_viewport_size({"width": 1280, "height": 900})
        transcript = page.locator("#transcript").bounding_box()
        side = page.locator("#side").bounding_box()
        assert transcript is not None
        assert side is not None
        assert side["x"] >= transcript["x"] + transcript["width"]  # beside it
        page.screenshot(path=str(tmp_path / "wide.png"))

        page.check("#vision")
        page.click("#apply")
        page.wait_for_url("**vision=1**")
        assert parse_qs(urlsplit(page.url).query)["vision"] == ["1"]
        page.wait_for_selector("#side .replay")
        assert "[Image not shown" not in page.inner_text("#side .replay")
        page.uncheck("#vision")
        page.click("#apply")
        page.wait_for_url(lambda url: "vision=1" not in url)
        assert parse_qs(urlsplit(page.url).query).get("vision", ["0"]) == ["0"]
        page.wait_for_selector("#side .replay")
        assert "[Image not shown" in page.inner_text("#side .replay")  # off again
    assert errors == []
