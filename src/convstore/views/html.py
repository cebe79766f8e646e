"""HTML for the web surface and for `export --format html`: one set of functions for both.

Every recorded string goes through :func:`esc` (``html.escape`` with quotes) before it
reaches the page; nothing from a conversation is ever put in a tag, an attribute name, a
script or a style. Links come only from image URLs and the sources a text's annotations cite,
and only when they are ``http(s)``.
Pure standard library: the export path needs no web stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import assert_never
from urllib.parse import urlencode
from uuid import UUID

from convstore.domain.blocks import (
    AnyToolResult,
    AnyToolUse,
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolResultPart,
    ToolUseBlock,
)
from convstore.domain.events import Compacted, Event, happened
from convstore.engine.model import folded
from convstore.engine.plan import SHAPES, JSONDict, ReplayOptions, Shape
from convstore.engine.pressure import Pressure
from convstore.engine.render import plan, wire
from convstore.projections.messages import History, RecordedMessage, collect_messages
from convstore.projections.prose import (
    annotation_source,
    describe_meta,
    document_caption,
    document_context,
    extra_json,
    hosted_mark,
    source_claim,
    tool_result_head,
)
from convstore.projections.wording import BLOCK_SEPARATOR
from convstore.views.hits import MARK_END, MARK_START, Hit

PAGE_SIZE = 200
"""Messages per transcript page: a 10,000-message conversation opens at its newest 200, read
backwards from the end of its log (``Store.tail``), with a link to load earlier ones."""

TEXT_LIMIT = 100_000
"""Characters of one block shown on a page; the rest is cut, with a note saying how much."""

CHART_MESSAGES = 400
"""The newest wire messages drawn in the by-message pressure chart."""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:.6em 1em;background:#24292f;color:#fff}
header a{color:#9cf}
main{padding:.5em 1em}
.cols{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1em}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
.msg{border:1px solid #ddd;border-radius:6px;margin:.5em 0;padding:.4em .7em;background:#fff}
.msg.user{border-left:4px solid #2f81f7}.msg.assistant{border-left:4px solid #8250df}
.msg.system{border-left:4px solid #999}.msg.tool{border-left:4px solid #1a7f37}
.msg.withdrawn{opacity:.55;border-style:dashed}
.meta{color:#666;font-size:12px}
.badge{display:inline-block;border-radius:4px;padding:0 .4em;font-size:12px;margin-left:.3em}
.b-open{background:#fff3bf}.b-interrupted{background:#ffd8a8}.b-withdrawn{background:#e9ecef}
.b-error{background:#ffc9c9}.b-noresult{background:#ffe066}.b-ok{background:#d3f9d8}
pre{white-space:pre-wrap;word-break:break-word;margin:.3em 0;font-size:12.5px}
details{margin:.3em 0}summary{cursor:pointer}
.compaction{border:2px dashed #e8590c;background:#fff4e6;padding:.4em .7em;margin:.6em 0}
.cut{color:#c92a2a;font-style:italic}
img.shown{max-width:100%;max-height:480px;border:1px solid #ccc}
.pager a,.pager span{margin-right:.6em}
form.view label,form.filters label{margin-right:.8em}
form.filters{margin:.4em 0 .8em}
.b-label{background:#e7f5ff;color:#1c4f80;text-decoration:none}
.note{border:1px solid #f0c36d;background:#fff9db;padding:.4em .7em}
.note.ok{border-color:#ddd;background:#f8f9fa;color:#666}
mark{background:#ffe066}
ul.hits{margin:.2em 0;padding-left:1.2em}
svg text{font:11px system-ui,sans-serif}
.b-hosted{background:#e5dbff}
.sources{margin:.1em 0 .3em}
.msg{cursor:pointer}.msg.selected{outline:2px solid #f08c00}
.wire{margin:.4em 0;border-left:3px solid #ced4da;padding-left:.4em}
.wire.selected{border-left-color:#f08c00;background:#fff4e6}
.side .replay{max-height:70vh;overflow:auto;background:#f1f3f5;padding:.5em}
.facts{margin:.3em 0 .6em}
.wire-json summary{color:#666;font-size:12px}
svg{max-width:100%;height:auto}
@media (max-width:700px){.cols{grid-template-columns:minmax(0,1fr)}}
"""


_REPLAY_DEFAULTS = ReplayOptions()


@dataclass(frozen=True, slots=True)
class View:
    """The replay options a page shows the replay and pressure for (its query parameters);
    with none given, replay's own defaults, as `convstore replay` uses them."""

    shape: Shape = _REPLAY_DEFAULTS.shape
    vision: bool = _REPLAY_DEFAULTS.vision
    full: bool = _REPLAY_DEFAULTS.full
    keep_tool_results: int | None = _REPLAY_DEFAULTS.keep_tool_results

    @property
    def options(self) -> ReplayOptions:
        """The view as the replay options it shows."""
        return ReplayOptions(self.shape, self.vision, self.full, self.keep_tool_results)

    def query(self, **extra: int) -> str:
        """The query string that selects this view (plus ``extra`` such as a page)."""
        params: dict[str, str | int] = {"shape": self.shape, "vision": int(self.vision)}
        if self.full:
            params["full"] = 1
        if self.keep_tool_results is not None:
            params["keep"] = self.keep_tool_results
        params.update(extra)
        return urlencode(params)


def esc(value: object) -> str:
    """Recorded text made inert: ``&``, ``<``, ``>`` and both quotes escaped."""
    return escape(str(value), quote=True)


def when(moment: datetime) -> str:
    """A timestamp as shown: UTC to the second."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def clipped(text: str) -> str:
    """``text`` escaped for a ``<pre>``, cut at :data:`TEXT_LIMIT` characters with a note."""
    if len(text) <= TEXT_LIMIT:
        return esc(text)
    rest = len(text) - TEXT_LIMIT
    return (
        f"{esc(text[:TEXT_LIMIT])}<span class='cut'>\n[... {rest:,} more characters not shown; "
        "`convstore export CONV --format jsonl` has every byte]</span>"
    )


def safe_link(url: str) -> str | None:
    """``url`` when it is an http(s) address, else ``None`` (no ``javascript:`` ever)."""
    return url if url.lower().startswith(("http://", "https://")) else None


def image_html(image: ImageBlock) -> str:
    """A base64 image inline as a data: URL; a URL image as a link (never fetched here)."""
    if image.data is not None:
        source = f"data:{image.media_type};base64,{image.data}"
        return (
            f"<img class='shown' alt='{esc(image.media_type)} image, "
            f"{image.byte_size:,} bytes' src='{esc(source)}'>"
        )
    link = safe_link(image.url or "")
    if link is None:
        return (
            f"<span class='badge b-error'>image with an unusable address: {esc(image.url)}</span>"
        )
    return (
        f"<a href='{esc(link)}' rel='noopener noreferrer nofollow'>image at {esc(link)}</a> "
        "<span class='meta'>(not fetched)</span>"
    )


def document_html(document: DocumentBlock) -> str:
    """A document, at the top level or inside a tool's output: its caption, and its text
    folded under it when it was given as text."""
    text = "" if document.text is None else f"<pre>{clipped(document.text)}</pre>"
    if document.context is not None:
        text = f"<p class='context'>{esc(document_context(document.context))}</p>{text}"
    return (
        f"<details class='document'><summary>document {esc(document_caption(document))}"
        f"</summary>{text}</details>"
    )


def tool_output_html(content: str | Sequence[ToolResultPart]) -> str:
    """A tool result's output: its text, or its text, image and document parts in order."""
    if isinstance(content, str):
        return f"<pre>{clipped(content)}</pre>"
    parts: list[str] = []
    for part in content:
        match part:
            case TextBlock():
                parts.append(f"<pre>{clipped(part.text)}</pre>{sources_html(part)}")
            case ImageBlock():
                parts.append(f"<div>{image_html(part)}</div>")
            case DocumentBlock():
                parts.append(document_html(part))
            case _:
                assert_never(part)
    return "".join(parts)


def sources_html(text: TextBlock) -> str:
    """The sources a text's annotations cite, each once in the order first cited (as replay's
    sources line has them): a link when the citation gives an http(s) address."""
    found: dict[str, str | None] = {}
    for annotation in text.annotations or ():
        source = annotation_source(annotation)
        if source is None:
            continue
        url = annotation.get("url")
        found.setdefault(source, safe_link(url) if isinstance(url, str) else None)
    if not found:
        return ""
    shown = [
        esc(source)
        if link is None
        else f"<a href='{esc(link)}' rel='noopener noreferrer nofollow'>{esc(source)}</a>"
        for source, link in found.items()
    ]
    return f"<div class='meta sources'>Sources: {'; '.join(shown)}</div>"


@dataclass(frozen=True, slots=True)
class Answer:
    """A recorded tool result, and the element id it is shown under on the page."""

    result: AnyToolResult
    anchor: str


def block_anchor(message: UUID, index: int) -> str:
    """The element id of a message's block: made of the message's id and the block's place,
    never of recorded text."""
    return f"b-{message}-{index}"


def outcome_badge(answer: Answer | None) -> str:
    """Whether a call got a result, and whether that result was an error; a result recorded
    is linked to (it is shown once, in the message it was recorded in)."""
    if answer is None:
        return "<span class='badge b-noresult'>no result</span>"
    return f"<a href='#{answer.anchor}'>{result_badge(answer.result)}</a>"


def result_badge(result: AnyToolResult) -> str:
    """Whether a result was an error."""
    if result.is_error:
        return "<span class='badge b-error'>error</span>"
    return "<span class='badge b-ok'>ok</span>"


def hosted_badge(block: AnyToolUse) -> str:
    """The mark of a call the provider ran itself, with its MCP server (its result's head says
    so in words); none on the caller's own calls."""
    match block:
        case ToolUseBlock():
            return ""
        case HostedToolUseBlock():
            return f"<span class='badge b-hosted'>{esc(hosted_mark(block.server))}</span>"
        case _:
            assert_never(block)


def provider_data_html(block: HostedToolUseBlock | HostedToolResultBlock) -> str:
    """The provider's own payload of a hosted call or result, folded away (clipped like any
    block: it may hold whole pages of encrypted content)."""
    if not block.provider_data:
        return ""
    data = json.dumps(block.provider_data, ensure_ascii=False, indent=2)
    return (
        "<details class='provider-data'><summary>provider data</summary>"
        f"<pre>{clipped(data)}</pre></details>"
    )


def tool_input_text(value: object) -> str:
    """A call's input as indented JSON, or the raw text a model emitted instead."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)


def call_html(block: AnyToolUse, answer: Answer | None) -> str:
    """A call folded: its name, id, who ran it and its outcome (linked to its result), then
    its input."""
    extra = provider_data_html(block) if isinstance(block, HostedToolUseBlock) else ""
    return (
        f"<details class='tool-call'><summary>tool call <b>{esc(block.name)}</b> "
        f"<span class='meta'>{esc(block.id)}</span>{hosted_badge(block)}"
        f"{outcome_badge(answer)}</summary>"
        f"<div class='meta'>input:</div><pre>{clipped(tool_input_text(block.input))}</pre>"
        f"{extra}</details>"
    )


def result_html(block: AnyToolResult, tool_name: str | None, anchor: str) -> str:
    """A result folded, where it was recorded (the one place a result shows): its head as
    replay's prose words it, the call it answers, then its output."""
    extra = provider_data_html(block) if isinstance(block, HostedToolResultBlock) else ""
    head = tool_result_head(block, tool_name).rstrip(": ")
    return (
        f"<details class='tool-result' id='{anchor}'><summary>"
        f"{esc(head)} <span class='meta'>{esc(block.tool_use_id)}</span>"
        f"{result_badge(block)}</summary>{tool_output_html(block.content)}{extra}</details>"
    )


def block_html(block: Block, tool_name: str | None, results: dict[str, Answer], anchor: str) -> str:
    """One block: text as text (with the sources it cites), calls and results folded (a
    result shown once, where it was recorded; its call links to it), reasoning folded,
    images and documents shown."""
    match block:
        case TextBlock():
            return f"<pre class='text'>{clipped(block.text)}</pre>{sources_html(block)}"
        case ReasoningBlock():
            label = "reasoning (redacted: encrypted only)" if block.redacted else "reasoning"
            return (
                f"<details class='reasoning'><summary>{label}</summary>"
                f"<pre>{clipped(block.text)}</pre></details>"
            )
        case ImageBlock():
            return f"<div class='image'>{image_html(block)}</div>"
        case DocumentBlock():
            return document_html(block)
        case ToolUseBlock() | HostedToolUseBlock():
            return call_html(block, results.get(block.id))
        case ToolResultBlock() | HostedToolResultBlock():
            return result_html(block, tool_name, anchor)
        case _:
            assert_never(block)


def tool_results(messages: Iterable[RecordedMessage]) -> dict[str, Answer]:
    """Every recorded tool result (hosted ones too) by the id of the call it answers (the
    last one wins), with where it is shown."""
    found: dict[str, Answer] = {}
    for message in messages:
        for index, recorded in enumerate(message.blocks):
            if isinstance(recorded.block, ToolResultBlock | HostedToolResultBlock):
                anchor = block_anchor(message.message_id, index)
                found[recorded.block.tool_use_id] = Answer(recorded.block, anchor)
    return found


def message_html(message: RecordedMessage, number: int | None, results: dict[str, Answer]) -> str:
    """One message: role, time, status marks, what the runtime recorded about it (model,
    tokens, stop reason, latency) and its blocks."""
    marks = ""
    if message.status == "open":
        marks += "<span class='badge b-open'>open (not ended)</span>"
    elif message.status == "interrupted":
        reason = f": {esc(message.interrupt_reason)}" if message.interrupt_reason else ""
        marks += f"<span class='badge b-interrupted'>interrupted{reason}</span>"
    if message.withdrawn:
        marks += "<span class='badge b-withdrawn'>withdrawn by a rewind (not replayed)</span>"
    classes = f"msg {esc(message.role)}" + (" withdrawn" if message.withdrawn else "")
    blocks = "".join(
        block_html(b.block, b.tool_name, results, block_anchor(message.message_id, index))
        for index, b in enumerate(message.blocks)
    )
    described = "" if message.meta is None else describe_meta(message.meta)
    meta = f"<div class='meta msg-meta'>{esc(described)}</div>" if described else ""
    extras = "" if message.meta is None else extra_json(message.meta)
    if extras:  # bookkeeping (an import's line and request ids): there, folded away
        meta += (
            "<details class='meta msg-extra'><summary>metadata extras</summary>"
            f"<code>{esc(extras)}</code></details>"
        )
    return (
        f"<section class='{classes}' id='m-{message.message_id}'>"
        f"<div class='meta'>{'' if number is None else f'#{number} '}<b>{esc(message.role)}</b> · "
        f"{when(message.started_at)}{esc(source_claim(message.claimed_at))}{marks}</div>"
        f"{meta}{blocks}</section>"
    )


def compaction_html(compaction: Compacted) -> str:
    """A compaction boundary: replay (unless full) starts with this summary."""
    return (
        f"<div class='compaction'><b>Compaction</b> "
        f"<span class='meta'>{when(happened(compaction))}</span>: replay starts here with "
        f"this summary in place of every message above.<pre>{clipped(compaction.summary)}</pre>"
        "</div>"
    )


@dataclass(frozen=True, slots=True)
class Window:
    """The messages one transcript page shows, and where it sits in the conversation."""

    messages: Sequence[RecordedMessage]
    results: dict[str, Answer]
    """Every tool result recorded from the page's first message on, by call id."""
    compactions: Sequence[Compacted]
    first_number: int | None
    """The number of the page's first message (1 for the first ever), when known."""
    total: int | None
    """How many messages the conversation holds, when known."""
    earlier: int | None = None
    """The ``before`` of the page of older messages; ``None`` when this page starts the
    conversation."""
    newest: bool = True
    """Whether the page ends at the newest message (live updates refresh only that page)."""

    @classmethod
    def whole(cls, history: History) -> Window:
        """Every message of a conversation folded whole (the export)."""
        total = len(history.messages)
        return cls(history.messages, tool_results(history.messages), history.compactions, 1, total)


def transcript_html(conversation: UUID, window: Window, *, view: View, paged: bool) -> str:
    """The transcript: the window's messages, with a compaction boundary after the message
    each compaction runs through, and (``paged``) links to older and newest messages."""
    after: dict[UUID, list[Compacted]] = {}
    for compaction in window.compactions:
        after.setdefault(compaction.through, []).append(compaction)
    parts: list[str] = []
    for offset, message in enumerate(window.messages):
        number = None if window.first_number is None else window.first_number + offset
        parts.append(message_html(message, number, window.results))
        parts.extend(compaction_html(c) for c in after.get(message.message_id, []))
    if not window.messages:
        parts.append("<p class='meta'>No messages yet.</p>")
    top = bottom = ""
    if paged:
        top = pager_html(f"/c/{conversation}", window, view, top=True)
        bottom = pager_html(f"/c/{conversation}", window, view, top=False)
    return f"<div class='page' data-last='{int(window.newest)}'>{top}{''.join(parts)}{bottom}</div>"


def span_text(window: Window) -> str:
    """Which messages a page shows, as far as it is known."""
    count = len(window.messages)
    if window.first_number is not None and count:
        last = window.first_number + count - 1
        of = "" if window.total is None else f" of {window.total:,}"
        return f"messages {window.first_number:,} to {last:,}{of}"
    which = "newest" if window.newest else "earlier"
    return f"the {count:,} {which} messages shown here"


def pager_html(base: str, window: Window, view: View, *, top: bool) -> str:
    """Links to older messages (at the top) and back to the newest (at the bottom)."""
    links = [f"<span>{esc(span_text(window))}</span>"]
    if top and window.earlier is not None:
        query = esc(view.query(before=window.earlier))
        links.append(f"<a class='earlier' href='{esc(base)}?{query}'>&lsaquo; load earlier</a>")
    if not window.newest:
        links.append(
            f"<a class='newest' href='{esc(base)}?{esc(view.query())}'>newest &rsaquo;</a>"
        )
    if len(links) == 1 and not top:
        return ""
    return f"<nav class='pager'>{''.join(links)}</nav>"


def bars_svg(rows: Sequence[tuple[str, int]], title: str) -> str:
    """A horizontal bar chart as inline SVG: one labelled bar per row."""
    if not rows:
        return f"<p class='meta'>{esc(title)}: nothing to draw.</p>"
    top = max(value for _, value in rows) or 1
    height = 16
    width, label_width = 420, 130
    bars: list[str] = []
    for i, (label, value) in enumerate(rows):
        y = i * height
        length = round((width - label_width - 60) * value / top)
        bars.append(
            f"<text x='0' y='{y + 12}'>{esc(label)}</text>"
            f"<rect x='{label_width}' y='{y + 3}' width='{max(length, 1)}' height='11' "
            "fill='#4c6ef5'></rect>"
            f"<text x='{label_width + length + 4}' y='{y + 12}'>{value:,}</text>"
        )
    return (
        f"<figure><figcaption>{esc(title)}</figcaption>"
        f"<svg role='img' width='{width}' height='{len(rows) * height + 4}' "
        f"viewBox='0 0 {width} {len(rows) * height + 4}' "
        f"xmlns='http://www.w3.org/2000/svg'>{''.join(bars)}</svg></figure>"
    )


def pressure_html(pressure: Pressure) -> str:
    """The context-pressure charts: tokens by block kind and by wire message."""
    kinds = sorted(pressure.by_kind.items(), key=lambda item: -item[1])
    shown = pressure.by_message[-CHART_MESSAGES:]
    per_message = [(f"#{m.number} {m.role}", m.tokens) for m in shown]
    note = (
        f"<p class='meta'>The newest {len(shown)} of {len(pressure.by_message)} messages.</p>"
        if len(shown) < len(pressure.by_message)
        else ""
    )
    return (
        f"<h3>Context pressure: {pressure.total:,} tokens "
        f"<span class='meta'>({esc(pressure.tokenizer)})</span></h3>"
        f"{bars_svg(kinds, 'tokens by block kind')}{note}"
        f"{bars_svg(per_message, 'tokens by wire message')}"
    )


@dataclass(frozen=True, slots=True)
class Replayed:
    """What replay sends with a view's options, and which stored message each wire message is
    (so the page can line the replay up with the transcript)."""

    body: JSONDict
    """Exactly what :meth:`Store.replay` returns for the same events and options."""
    owners: list[UUID | None]
    """Per entry of ``body["messages"]``, the stored message it is; ``None`` for the one
    replay adds (a compaction's summary, the marker before a history that opens with the
    assistant)."""
    numbers: list[int]
    """Per entry of ``body["messages"]``, its number in replay order counting from 1, system
    messages included: the number `convstore pressure` and the pressure chart give it."""
    system: list[UUID]
    """The stored system messages the Anthropic shape joins into ``system``."""
    system_numbers: list[int]
    """Their numbers in replay order, as ``numbers`` counts."""
    transcript: dict[UUID, int]
    """Each stored message's number in the transcript (counting from 1, as `show` does)."""


def replayed(events: Sequence[Event], options: ReplayOptions) -> Replayed:
    """Replay ``events`` with ``options`` through the engine's one plan and render (as
    :meth:`Store.replay` does), keeping from the plan which stored message each wire message
    is, and the numbers a person reads for both."""
    state, load = folded(events)
    planned = plan(state, options, load)
    owners: list[UUID | None] = []
    numbers: list[int] = []
    system: list[UUID] = []
    system_numbers: list[int] = []
    for number, source in enumerate(planned.window, 1):
        if isinstance(source, str):
            owners.append(None)
            numbers.append(number)
        elif options.shape == "anthropic" and source.role == "system":
            system.append(UUID(source.message_id))
            system_numbers.append(number)
        else:
            owners.append(UUID(source.message_id))
            numbers.append(number)
    # The transcript's numbers: each message's place in start order (the one fold of them).
    transcript = {m.message_id: number for number, m in enumerate(collect_messages(events), 1)}
    return Replayed(
        wire(planned, options.shape), owners, numbers, system, system_numbers, transcript
    )


def wire_part_text(part: JSONDict) -> str:
    """One part of a wire message's content as a person reads it: a text part its text, an
    image or a PDF a bracketed note naming it (its bytes are in the raw JSON)."""
    match part.get("type"):
        case "text":
            return str(part["text"])
        case "image_url":  # OpenAI
            url = str(part["image_url"]["url"])
            inline = url.startswith("data:")  # data:MEDIA_TYPE;base64,...
            return f"[image: {url[5:].split(';', 1)[0] if inline else url}]"
        case "image":  # Anthropic
            source = part["source"]
            return f"[image: {source.get('url') or source.get('media_type')}]"
        case "file":  # OpenAI: a PDF
            return f"[document: {part['file'].get('filename')}]"
        case "document":  # Anthropic: a PDF
            return f"[document: {part.get('title') or part['source'].get('media_type')}]"
        case other:  # a part this page does not know: named, its JSON one click away
            return f"[{other} part: see the JSON as sent]"


def wire_text(value: object) -> str:
    """A wire message (or the Anthropic shape's ``system``) as text: its content as the model
    reads it, text parts joined as replay joins blocks, not JSON-escaped."""
    if isinstance(value, str):
        return value
    assert isinstance(value, dict)
    content = value["content"]
    if isinstance(content, str):
        return content
    return BLOCK_SEPARATOR.join(wire_part_text(part) for part in content)


def wire_html(
    label: str, value: object, owners: Sequence[UUID], transcript: dict[UUID, int]
) -> str:
    """One wire message (or the Anthropic shape's ``system``) as text, with its JSON as sent
    one click away, naming the stored messages it is (``data-for``: the ids of their sections
    in the transcript) and their numbers in the transcript."""
    if owners:
        who = ", ".join(
            f"stored message {owner} (#{transcript[owner]} in the transcript)" for owner in owners
        )
    else:
        who = "added by replay: no stored message"
    keys = " ".join(f"m-{owner}" for owner in owners)
    body = json.dumps(value, ensure_ascii=False, indent=2)
    return (
        f"<div class='wire' data-for='{keys}'><div class='meta'>{esc(label)} · {esc(who)}</div>"
        f"<pre class='wire-text'>{clipped(wire_text(value))}</pre>"
        "<details class='wire-json'><summary>JSON as sent</summary>"
        f"<pre>{clipped(body)}</pre></details></div>"
    )


def replay_html(replay: Replayed, view: View) -> str:
    """What the model is sent with ``view``'s options, one wire message at a time, each
    numbered from 1 (as `convstore pressure` numbers it) and naming the stored message it
    is."""
    options = f"shape={view.shape}, vision={'on' if view.vision else 'off'}"
    if view.full:
        options += ", full"
    if view.keep_tool_results is not None:
        options += f", keep_tool_results={view.keep_tool_results}"
    parts: list[str] = []
    if "system" in replay.body:
        label = "system · wire " + ", ".join(f"#{n}" for n in replay.system_numbers)
        parts.append(wire_html(label, replay.body["system"], replay.system, replay.transcript))
    messages = replay.body["messages"]
    assert isinstance(messages, list)
    for message, owner, number in zip(messages, replay.owners, replay.numbers, strict=True):
        owned = [] if owner is None else [owner]
        label = f"wire #{number} · {message['role']}"
        parts.append(wire_html(label, message, owned, replay.transcript))
    if not messages:
        parts.append("<p class='meta'>No wire messages: nothing to send yet.</p>")
    return (
        f"<h3>Replay <span class='meta'>({esc(options)}): exactly what Store.replay returns, "
        "one wire message per stored message (select a message to see its own)</span></h3>"
        f"<p class='meta' id='wire-note'></p><div class='replay'>{''.join(parts)}</div>"
    )


def side_html(replay: Replayed, pressure: Pressure, view: View) -> str:
    """The replay and its context pressure, as the export shows them beside the transcript."""
    return replay_html(replay, view) + pressure_html(pressure)


def view_form(action: str, view: View, before: int | None = None) -> str:
    """The replay options as a GET form (reloading the page applies them, on the same
    messages)."""
    shapes = "".join(
        f"<option value='{esc(s)}'{' selected' if s == view.shape else ''}>{esc(s)}</option>"
        for s in SHAPES
    )
    keep = "" if view.keep_tool_results is None else str(view.keep_tool_results)
    return (
        f"<form class='view' method='get' action='{esc(action)}'>"
        + ("" if before is None else f"<input type='hidden' name='before' value='{before}'>")
        + f"<label>shape <select name='shape'>{shapes}</select></label>"
        f"<label><input type='checkbox' id='vision' name='vision' value='1'"
        f"{' checked' if view.vision else ''}> vision</label>"
        f"<label><input type='checkbox' name='full' value='1'"
        f"{' checked' if view.full else ''}> full (ignore compaction)</label>"
        f"<label>keep tool results <input type='number' min='0' name='keep' value='{esc(keep)}'"
        " size='4'></label><button type='submit' id='apply'>apply</button></form>"
    )


def document(title: str, body: str, *, exported: bool) -> str:
    """A whole page. Served: CSS and script from the app's own static files. Exported: CSS
    inline, no script at all, and a CSP that lets the file load nothing from anywhere."""
    if exported:
        head = (
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">"
            f"<style>{CSS}</style>"
        )
    else:
        head = (
            "<link rel='stylesheet' href='/static/app.css'>"
            "<script src='/static/app.js' defer></script>"
        )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='referrer' content='no-referrer'>"
        f"<title>{esc(title)}</title>{head}</head><body>{body}</body></html>"
    )


@dataclass(frozen=True, slots=True)
class Facts:
    """What a conversation page says about the conversation as a whole, as recorded."""

    started: datetime
    """When it started (its source's time, for an imported one)."""
    labels: dict[str, str]
    source: str | None = None
    """Where it was imported from."""
    parent: tuple[UUID, str] | None = None
    """The conversation it branched from (a subagent's session, a fork's parent), and its
    shown title."""
    children: Sequence[tuple[UUID, str]] = ()
    """The conversations that branched from it, and their shown titles."""


def facts_html(facts: Facts, *, linked: bool) -> str:
    """A conversation's facts under its title: when it started, where it came from, its
    labels, its parent and its children (``linked``: as links to their pages; an exported
    file has no pages to link to, so it names them)."""

    def conversation_link(conversation: UUID, title: str) -> str:
        if linked:
            return f"<a class='conv-link' href='/c/{conversation}'>{esc(title)}</a>"
        return f"{esc(title)} <span class='meta'>{conversation}</span>"

    items = [f"started {when(facts.started)}"]
    if facts.source is not None:
        items.append(f"imported from {esc(facts.source)}")
    if facts.parent is not None:
        items.append(f"<span class='parent'>↳ branch of {conversation_link(*facts.parent)}</span>")
    line = " · ".join(items)
    labels = (
        labels_html(facts.labels)
        if linked
        else "".join(
            f"<span class='badge b-label'>{esc(key)}={esc(value)}</span>"
            for key, value in sorted(facts.labels.items())
        )
    )
    children = ""
    if facts.children:
        shown = ", ".join(conversation_link(*child) for child in facts.children)
        children = (
            f"<div class='children'>{len(facts.children):,} "
            f"{'branch' if len(facts.children) == 1 else 'branches'} "
            f"(subagents, forks): {shown}</div>"
        )
    return f"<div class='meta facts'>{line}{labels}{children}</div>"


def conversation_body(
    conversation: UUID,
    title: str | None,
    window: Window,
    *,
    before: int | None,
    view: View,
    side: str | None,
    version: int,
    facts: Facts | None = None,
) -> str:
    """The conversation page's body: the transcript and, beside it, the replay side.

    ``side`` is the replay pane's HTML, or ``None`` to have the page fetch it (served pages
    load it after the transcript so a long conversation opens fast); served pages are
    paged, the export shows every message.
    """
    name = title or str(conversation)
    served = side is None
    transcript = transcript_html(conversation, window, view=view, paged=served)
    count = "" if window.total is None else f" · {window.total:,} messages"
    if served:
        query = esc(view.query())
        pane = (
            f"<aside class='side' id='side'><div id='replay' data-src='/c/{conversation}/replay?"
            f"{query}'><p class='meta'>Loading the replay…</p></div><div id='pressure' "
            f"data-src='/c/{conversation}/pressure?{query}'><p class='meta'>Measuring the "
            "context pressure…</p></div></aside>"
        )
        form = view_form(f"/c/{conversation}", view, before)
        home = "<a href='/'>conversations</a> · "
    else:
        pane = f"<aside class='side' id='side'>{side}</aside>"
        form = home = ""
    about = "" if facts is None else facts_html(facts, linked=served)
    # Live updates refresh the newest page; a page reached by its end that is the newest
    # becomes the plain newest page when messages arrive.
    query = view.query() if before is None or window.newest else view.query(before=before)
    return (
        f"<header>{home}<b>{esc(name)}</b> <span class='meta'>{conversation}{count}</span>"
        f"</header><main id='conversation' data-conv='{conversation}' data-version='{version}' "
        f"data-query='{esc(query)}'>{about}{form}"
        f"<div class='cols'><div id='transcript'>{transcript}</div>{pane}</div></main>"
    )


@dataclass(frozen=True, slots=True)
class ListedConversation:
    """One row of the conversation list (counts ``None`` when not known)."""

    id: UUID
    title: str | None
    last_activity: datetime
    labels: dict[str, str]
    messages: int | None
    tool_calls: int | None
    """Its calls, the caller's and the provider's."""
    hosted_calls: int | None = None
    """How many of :attr:`tool_calls` the provider ran itself."""
    preview: str | None = None
    """The start of its first user text, shown when it has no title."""
    parent: tuple[UUID, str] | None = None
    """The conversation it branched from (a subagent's session, a fork's parent), and its
    shown title."""
    children: int = 0
    """How many conversations branched from it."""
    source: str | None = None
    """Where it was imported from."""


@dataclass(frozen=True, slots=True)
class Filters:
    """The list page's filters, as its query string gives them (checked by the app)."""

    q: str = ""
    title: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    active_after: str = ""
    active_before: str = ""

    def query(self, **extra: str) -> str:
        """The query string that selects these filters (plus ``extra`` such as a cursor)."""
        params: list[tuple[str, str]] = [
            (name, value)
            for name, value in (
                ("q", self.q),
                ("title", self.title),
                ("active_after", self.active_after),
                ("active_before", self.active_before),
            )
            if value
        ]
        params += [("label", f"{key}={value}") for key, value in self.labels]
        params += list(extra.items())
        return urlencode(params)

    @property
    def active(self) -> bool:
        """Whether any filter (other than the search words) is set."""
        return bool(self.title or self.labels or self.active_after or self.active_before)


@dataclass(frozen=True, slots=True)
class SearchRow:
    """One conversation a search found, with its best matching blocks."""

    row: ListedConversation
    matches: int
    hits: Sequence[Hit]


def snippet_html(snippet: str) -> str:
    """A search snippet escaped, then its match marks turned into ``<mark>`` tags."""
    return esc(snippet).replace(MARK_START, "<mark>").replace(MARK_END, "</mark>")


def filter_form(filters: Filters) -> str:
    """The search words and the listing filters as one GET form."""
    labels = [*(f"{key}={value}" for key, value in filters.labels), ""]
    label_inputs = "".join(
        f"<input name='label' value='{esc(label)}' placeholder='key=value' size='14'>"
        for label in labels
    )
    return (
        "<form class='filters' method='get' action='/'>"
        f"<label>search <input type='search' id='q' name='q' value='{esc(filters.q)}' "
        "placeholder='words in any block' size='28'></label>"
        f"<label>title <input name='title' value='{esc(filters.title)}' size='14'></label>"
        f"<label>labels {label_inputs}</label>"
        "<label>active after <input name='active_after' placeholder='YYYY-MM-DD' "
        f"value='{esc(filters.active_after)}' size='11'></label>"
        "<label>before <input name='active_before' placeholder='YYYY-MM-DD' "
        f"value='{esc(filters.active_before)}' size='11'></label>"
        "<button type='submit' id='go'>go</button> <a href='/'>clear</a></form>"
    )


def labels_html(labels: dict[str, str]) -> str:
    """A conversation's labels as small badges, each a link that filters by it."""
    return "".join(
        f"<a class='badge b-label' href='/?{esc(urlencode({'label': f'{key}={value}'}))}'>"
        f"{esc(key)}={esc(value)}</a>"
        for key, value in sorted(labels.items())
    )


def count_html(value: int | None) -> str:
    """A count, or a mark saying it is not known yet."""
    if value is None:
        return "<span class='meta' title='not in the audit read model yet'>?</span>"
    return f"{value:,}"


def calls_html(calls: int | None, hosted: int | None) -> str:
    """A count of calls, saying how many of them the provider ran when any."""
    if calls is None or not hosted:
        return count_html(calls)
    return f"{calls:,} <span class='meta'>({hosted:,} hosted)</span>"


def row_html(row: ListedConversation, extra: str = "") -> str:
    """One conversation in the list: title (a link), labels, activity and counts, the
    conversation it branched from and how many branched from it."""
    if row.title:
        name = esc(row.title)
    elif row.preview:
        name = f"<span class='preview'>“{esc(row.preview)}”</span>"
    else:
        name = "(untitled)"
    branch = ""
    if row.parent is not None:
        parent, title = row.parent
        branch = (
            f"<div class='meta branch'>↳ branch of <a href='/c/{parent}'>{esc(title)}</a></div>"
        )
    if row.children:
        many = "branch" if row.children == 1 else "branches"
        branch += f"<div class='meta children'>{row.children:,} {many} (subagents, forks)</div>"
    if row.source is not None:
        branch += f"<div class='meta'>imported from {esc(row.source)}</div>"
    return (
        f"<tr><td><a class='conv' href='/c/{row.id}'>{name}</a>"
        f"{labels_html(row.labels)}<div class='meta'>{row.id}</div>{branch}{extra}</td>"
        f"<td>{when(row.last_activity)}</td><td>{count_html(row.messages)}</td>"
        f"<td>{calls_html(row.tool_calls, row.hosted_calls)}</td></tr>"
    )


def hit_html(conversation: UUID, hit: Hit) -> str:
    """One matching block: where it is, and its snippet, linking to its message."""
    where = hit.kind if hit.role is None else f"{hit.role} {hit.kind}"
    number = "" if hit.position is None else f"#{hit.position} "
    withdrawn = " <span class='badge b-withdrawn'>withdrawn</span>" if hit.withdrawn else ""
    anchor = "" if hit.message_id is None else f"#m-{hit.message_id}"
    return (
        f"<li><a class='hit' href='/c/{conversation}?before={hit.version + 1}{anchor}'>"
        f"{esc(number + where)}</a>{withdrawn}: <span class='snippet'>"
        f"{snippet_html(hit.snippet)}</span></li>"
    )


TABLE_HEAD = (
    "<table><thead><tr><th>title</th><th>last activity</th><th>messages</th>"
    "<th>tool calls</th></tr></thead><tbody>"
)


def list_body(
    rows: Sequence[ListedConversation],
    filters: Filters,
    *,
    next_cursor: str | None,
    first: bool,
    note: str,
) -> str:
    """The conversation list's body: the filter form, a page of conversations (newest
    activity first) and links to the next page."""
    links = []
    if not first:
        links.append(f"<a href='/?{esc(filters.query())}'>&laquo; first page</a>")
    if next_cursor is not None:
        query = esc(filters.query(after=next_cursor))
        links.append(f"<a class='next' href='/?{query}'>next page &rsaquo;</a>")
    pager = f"<nav class='pager'>{''.join(links)}</nav>" if links else ""
    empty = "" if rows else "<p class='meta'>No conversation matches.</p>"
    filtered = " (filtered)" if filters.active else ""
    return (
        f"<header><b>convstore</b> · conversations{filtered}, newest activity first "
        f"(read-only)</header><main>{filter_form(filters)}{note}{pager}{TABLE_HEAD}"
        f"{''.join(row_html(row) for row in rows)}</tbody></table>{empty}{pager}</main>"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def search_body(
    results: Sequence[SearchRow], filters: Filters, *, note: str, skip: int = 0, more: bool = False
) -> str:
    """Search results: conversations ranked by their best match, each with snippets, and
    links to the pages before and after (``skip`` results came before this page)."""
    rows = "".join(
        row_html(
            result.row,
            f"<div class='meta'>{_count(result.matches, 'matching block')}</div>"
            f"<ul class='hits'>{''.join(hit_html(result.row.id, h) for h in result.hits)}</ul>",
        )
        for result in results
    )
    empty = "" if results else "<p class='meta'>Nothing found.</p>"
    links = []
    if skip:
        links.append(f"<a href='/?{esc(filters.query())}'>&laquo; best matches</a>")
    if more:
        query = esc(filters.query(skip=str(skip + len(results))))
        links.append(f"<a class='next' href='/?{query}'>more results &rsaquo;</a>")
    nav = f"<nav class='pager'>{' '.join(links)}</nav>" if links else ""
    return (
        f"<header><b>convstore</b> · search: {esc(filters.q)} (best match first)</header>"
        f"<main>{filter_form(filters)}{note}<div id='results'>{TABLE_HEAD}{rows}"
        f"</tbody></table>{empty}</div>{nav}</main>"
    )
