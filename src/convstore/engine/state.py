"""The replay engine's state: each stored message's plan, stored and read back.

The one replay engine folds a conversation's events into a :class:`ReplayState`
(:func:`convstore.engine.model.fold`) and renders it (:mod:`convstore.engine.render`). The
state keeps what does not depend on the caller's options: per stored message, its role, how it
closed, and each block's prose (a *part*), plus the conversation's compactions and rewinds.
What the options change is worked out at render time from those facts: which messages a rewind
withdrew, the compaction window (``full``), which tool results microcompact clears
(``keep_tool_results``), which calls no result answered, and how images show (``vision``).

A state is folded event by event (:func:`convstore.engine.model.fold`), so a
state at version ``V`` plus the events after ``V`` equals a state folded from scratch. Its
messages and its head encode to deterministic text (:meth:`MessagePlan.encode`,
:meth:`ReplayState.encode_head`), so a stored copy can be thrown away and rebuilt identical. A
message that is closed and holds only text and reasoning can never change again: it is kept as
its content alone (two code letters, then the
text as is), which a fresh process reads without decoding anything.

Parts are JSON arrays, kept decoded as lists (cheap to read back in bulk):

- ``["x", text]`` a text block (its prose: the text, then the line naming the sources its
  annotations cite, when they cite any); ``["g", text]`` reasoning (its prose,
  ``[Reasoning]: …``);
- ``["u", text, call_id]`` a tool call; ``["U", text, call_id]`` a hosted one (a call the
  provider ran itself: ``text`` says so), which the rules treat as a call (a later message
  with no result for it marks it unanswered);
- ``["r", head, cleared, content, tool_use_id]`` a tool result: ``head`` is ``Result (name): ``
  or ``Error (name): ``, ``cleared`` the marker that replaces the output when microcompact
  clears it, ``content`` the output text, or a list of pieces: text (a text part with its
  sources line, a text document's prose, an unsendable document's marker), an image
  reference, or ``["d", ref, index]`` for a PDF a vision replay may send (``ref`` as in a
  ``d`` part below, ``index`` its place in the result's content); ``["R", …]`` the same for
  the result of a hosted call (microcompact clears either; only the pressure kind differs).
  A stored ``r`` part written before documents could sit in results holds no ``["d", …]``
  piece, and decodes as it always did;
- ``["i", ref]`` an image, where a reference is ``[version, index, media_type, url, blind,
  seen]``: the event holding the image (``index`` into a tool result's content, or ``None``),
  and the markers shown to a model that cannot see (``blind``) and to one that can, when the
  message's role cannot carry images (``seen``, ``None`` for a user message). Image data is
  never copied: a vision replay that shows an image reads it from the log by its version.
- ``["t", text]`` a document's prose: a text document's head and text, or the marker of one
  with no native form (a file id, a binary that is not a PDF); like text and reasoning it
  lets a closed message seal;
- ``["d", ref]`` a PDF a vision replay may send natively, where ``ref`` is ``[version,
  media_type, url, name, blind, seen, by_url]``: the event holding it, and the markers sent
  to a model that cannot see (``blind``), when the message's role cannot carry documents
  (``seen``, ``None`` for a user message) and, for a PDF given by URL, to a shape that takes
  none by URL (``by_url``). Like an image's, its data is read back from the log.
  ``images`` is set by either: the message holds something a vision replay shows natively.

This module imports nothing of the domain's models at run time (the fold, which reads events,
is :mod:`convstore.engine.model`; the render, :mod:`convstore.engine.render`, imports none
either), so a reader that only renders stored plans, such
as the command line's quick replay, starts without loading pydantic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from json.scanner import make_scanner
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

import lz4.block

from convstore.projections.wording import (
    BLANK_MESSAGE,
    BLOCK_SEPARATOR,
    NOTHING_RECORDED,
    PART_SEPARATOR,
    interruption_marker,
)

if TYPE_CHECKING:
    from convstore.domain.blocks import DocumentBlock, ImageBlock
    from convstore.domain.conversation import MessageStatus
    from convstore.domain.events import Role


class RenderOptions(Protocol):
    """What replay varies on besides the shape (:class:`convstore.ReplayOptions` is one)."""

    @property
    def vision(self) -> bool: ...
    @property
    def full(self) -> bool: ...
    @property
    def keep_tool_results(self) -> int | None: ...


PartData: TypeAlias = list[Any]
"""One block's prose as a JSON array (see the module's docstring)."""

ImageLoader: TypeAlias = "Callable[[int, int | None], ImageBlock | DocumentBlock]"
"""Reads the image recorded at a version (``index`` into a tool result's content, or ``None``
for an image block, or a document block) back from the log."""

MESSAGE_OVERHEAD = 240
"""Bytes a message's plan costs in memory beyond its text (objects, lists, the id)."""

ROLE_CODES: dict[Role, str] = {"system": "s", "user": "u", "assistant": "a"}
"""Each role's letter in a sealed message's row (tests hold its keys to the ``Role`` union)."""
_ROLE_CODES = ROLE_CODES
_ROLES_BY_CODE: dict[str, Role] = {code: role for role, code in _ROLE_CODES.items()}
STATUS_CODES: dict[MessageStatus, str] = {"ended": "e", "interrupted": "i"}
"""Each closed status's letter (tests hold its keys to ``MessageStatus`` less ``open``)."""
_STATUS_CODES = STATUS_CODES
_STATUSES_BY_CODE: dict[str, MessageStatus] = {code: s for s, code in _STATUS_CODES.items()}
assert len(_ROLES_BY_CODE) == len(ROLE_CODES), "role codes must differ"
assert len(_STATUSES_BY_CODE) == len(_STATUS_CODES), "status codes must differ"

RULES = 2
"""The version of the rules a stored model's rows were written under, kept in its head as
``v`` (a head without one was written under rules 1). 2: a blank message's content is its
marker alone (rules 1 joined its blank texts before the marker, so a sealed blank message's
row began with blank lines). A reader refuses a model of other rules and folds the log again,
storing it anew; ``verify`` compares a rules-1 model with the fold as rules 1 wrote it."""

CALL_CODES = frozenset({"u", "U"})
"""The codes of a call's part: the caller's tool (``u``), one the provider ran (``U``)."""
RESULT_CODES = frozenset({"r", "R"})
"""The codes of a result's part: the caller's tool (``r``), one the provider ran (``R``)."""

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type] # typeshed types the C scanner as a class
)


class MessagePlan:
    """One stored message as replay needs it, whatever the options."""

    __slots__ = (
        "answers",
        "blank",
        "calls",
        "fresh_mac",
        "images",
        "mac",
        "message_id",
        "parts",
        "plain",
        "reason",
        "results",
        "role",
        "simple",
        "size",
        "status",
    )

    def __init__(
        self,
        message_id: str,
        role: Role,
        status: MessageStatus = "open",
        reason: str | None = None,
        parts: list[PartData] | None = None,
    ) -> None:
        self.message_id = message_id
        """The message's id as 32 hex digits."""
        self.role: Role = role
        self.status: MessageStatus = status
        self.reason = reason
        self.parts: list[PartData] = []
        self.calls: list[str] = []
        self.answers: list[str] = []
        self.results = 0
        self.images = False
        self.blank = True
        self.size = MESSAGE_OVERHEAD
        self.simple = True
        """Whether every part is text or reasoning (its prose is the part's own text)."""
        self.plain: str | None = None
        """The content when nothing is cleared, no call is unanswered and no image shows
        (worked out on first use, dropped when the message changes)."""
        self.mac = 0
        """The :func:`row_mac` of the message's row as last stored or read (0: none yet): what
        :attr:`ReplayState.total` counts for it."""
        self.fresh_mac: int | None = None
        """The :func:`row_mac` of the text :meth:`encode` gives now, once worked out (dropped
        when the message changes)."""
        if parts:
            self._take(parts)
        self.status = status

    def add(self, part: PartData) -> None:
        """Append one block's part."""
        if self.sealed:
            msg = "a closed message takes no more blocks"
            raise ValueError(msg)
        self.plain = None
        self.fresh_mac = None
        self._take((part,))

    def _take(self, parts: Iterable[PartData]) -> None:
        """Append parts to a message that is not sealed, in one pass (a fresh process reads
        every stored message's parts this way)."""
        size, blank, simple, images, results = (
            self.size,
            self.blank,
            self.simple,
            self.images,
            self.results,
        )
        kept, calls, answers = self.parts, self.calls, self.answers
        for part in parts:
            code = part[0]
            if code == "x":
                if blank and part[1].strip():
                    blank = False
                size += 2 * len(part[1])
            elif code in {"g", "t"}:
                blank = False
                size += 2 * len(part[1])
            elif code in CALL_CODES:
                blank = simple = False
                calls.append(part[2])
                size += 2 * len(part[1])
            elif code in RESULT_CODES:
                blank = simple = False
                answers.append(part[4])
                results += 1
                content = part[3]
                if isinstance(content, str):
                    size += 2 * (len(part[1]) + len(content)) + len(part[2])
                else:
                    size += 2 * len(part[1]) + len(part[2])
                    for piece in content:
                        if isinstance(piece, str):
                            size += 2 * len(piece)
                            continue
                        images = True
                        if piece[0] == "d":
                            ref = piece[1]
                            size += 64 + len(ref[4]) + len(ref[5] or "") + len(ref[6] or "")
                        else:
                            size += 64 + len(piece[4]) + len(piece[5] or "")
            elif code == "i":
                blank = simple = False
                images = True
                size += 64 + len(part[1][4]) + len(part[1][5] or "")
            elif code == "d":
                blank = simple = False
                images = True
                size += 64 + len(part[1][4]) + len(part[1][5] or "") + len(part[1][6] or "")
            else:
                msg = f"unknown part code {code!r}"
                raise ValueError(msg)
            kept.append(part)
        self.size, self.blank, self.simple, self.images, self.results = (
            size,
            blank,
            simple,
            images,
            results,
        )

    def close(self, status: MessageStatus, reason: str | None = None) -> None:
        """The message ended or was interrupted."""
        if self.sealed:
            msg = "a closed message cannot close again"
            raise ValueError(msg)
        self.status = status
        self.reason = reason
        self.plain = None
        self.fresh_mac = None

    @property
    def sealed(self) -> bool:
        """Whether the message is closed and all text: its content can never change, so it is
        kept (and stored) as that one text, without its parts."""
        return self.status != "open" and self.simple

    def encode(self, rules: int = RULES) -> str:
        """The message's plan as text: deterministic, so a rebuild writes the same.

        A sealed message is its role's and status's codes, then its content as is (no JSON to
        decode when read back); any other is the JSON ``[role, status, reason, parts]``. With
        older ``rules``, the text those rules wrote (what ``verify`` compares a model stored
        under them with).
        """
        if self.sealed:
            content = self.content() if rules >= RULES else self._content_under_rules_1()
            return _ROLE_CODES[self.role] + _STATUS_CODES[self.status] + content
        return _ENCODE([self.role, self.status, self.reason, self.parts])

    def _content_under_rules_1(self) -> str:
        """The content rules 1 gave: a blank message's blank texts before its marker."""
        if not self.blank:
            return self.content()
        texts = [str(p[1]) for p in self.parts]
        texts.append(BLANK_MESSAGE if self.parts else NOTHING_RECORDED)
        if self.status == "interrupted":
            texts.append(interruption_marker(self.reason))
        return BLOCK_SEPARATOR.join(texts)

    @classmethod
    def decode(cls, message_id: str, text: str) -> MessagePlan:
        """A message read back from :meth:`encode`'s text.

        Decoded with the JSON module's scanner directly (the text has no whitespace around
        it), and a message of text blocks only is taken in without looking at each part: a
        fresh process reads every message of a conversation this way.
        """
        if text[:1] != "[":
            message = cls(message_id, _ROLES_BY_CODE[text[0]], _STATUSES_BY_CODE[text[1]])
            message.plain = text[2:]
            message.blank = False
            message.size += 2 * len(message.plain)
            return message
        try:
            (role, status, reason, parts), end = _SCAN(text, 0)
        except StopIteration:
            msg = "a stored replay plan is not JSON"
            raise ValueError(msg) from None
        if end != len(text):
            msg = "a stored replay plan has data after its JSON"
            raise ValueError(msg)
        if not all(part[0] == "x" for part in parts):
            message = cls(message_id, role, status, reason, parts)
        else:
            message = cls(message_id, role, status, reason)
            message.parts = parts
            texts = [part[1] for part in parts]
            message.blank = not any(t.strip() for t in texts)
            message.size += 2 * sum(map(len, texts))
        return message

    def content(self) -> str:
        """The message's text when nothing is cleared, no call is unanswered and images are
        hidden (the model cannot see)."""
        plain = self.plain
        if plain is None:
            if self.blank:
                # Its texts are all blank: the marker says so, with no blank lines before it.
                texts = [BLANK_MESSAGE if self.parts else NOTHING_RECORDED]
            elif self.simple:
                texts = [p[1] for p in self.parts]
            else:
                texts = [_blind_text(p) for p in self.parts]
            if self.status == "interrupted":
                texts.append(interruption_marker(self.reason))
            plain = BLOCK_SEPARATOR.join(texts)
            if not plain.strip():  # pragma: no cover - a marker is never blank
                plain = ""
            self.plain = plain
        return plain


PACK_FROM = 512
"""A plan of at least this many characters is stored packed (:func:`packed_plan`) by SQLite:
below it, LZ4 saves too little to be worth a step on every read."""

_PACKED = 1
"""First byte of a packed plan: LZ4's block format (its size, 4 bytes little-endian, then the
compressed bytes) follows. Plan text never starts with it (a JSON array or a role's code)."""

_LZ4_MAX_RATIO = 255
"""LZ4 never expands more than this, so a packed plan declaring a larger size is damaged."""


def packed_plan(text: str) -> str | bytes:
    """A plan as SQLite stores it: its text, or from :data:`PACK_FROM` characters its UTF-8
    packed with LZ4 behind a tag byte, when that saves an eighth or more. LZ4 is chosen for
    its read: a fresh process unpacks every row it reads, at ~3 µs a 4 KB plan here, against
    ~24 µs for zlib, whose smaller rows (~35% of the text against ~55%) would cost the first
    load more than the disk it saves. The row's MAC covers the text, not this
    form, so a row reads back only as the very text it was written from."""
    if len(text) < PACK_FROM:
        return text
    data = text.encode(errors="surrogatepass")
    packed = cast("bytes", lz4.block.compress(data))
    if len(packed) + 1 > len(data) - len(data) // 8:
        return text
    return bytes((_PACKED,)) + packed


def plan_text(stored: str | bytes) -> str:
    """The plan text a stored row holds: as it is, or unpacked (:func:`packed_plan`); bytes
    without the tag are its UTF-8. Raises :class:`ValueError` for a packed row that does not
    unpack (its MAC would not match anyway; this says why without reading garbage)."""
    if isinstance(stored, str):
        return stored
    return plan_bytes(stored).decode(errors="surrogatepass")


def plan_bytes(stored: bytes) -> bytes:
    """The UTF-8 of the plan text a row stored as bytes holds (see :func:`plan_text`)."""
    if not stored or stored[0] != _PACKED:
        return stored
    body = stored[1:]
    if int.from_bytes(body[:4], "little") > _LZ4_MAX_RATIO * len(body):
        msg = "a stored replay plan is damaged (its packed size is impossible)"
        raise ValueError(msg)
    try:
        return cast("bytes", lz4.block.decompress(body))
    except lz4.block.LZ4BlockError:
        msg = "a stored replay plan is damaged (it does not unpack)"
        raise ValueError(msg) from None


MAC_MODULUS = 1 << 256
"""The stored model's rows are summed modulo this (see :func:`row_mac`)."""

_KEYED: dict[bytes, Any] = {}
"""Per chain key, a SHA-256 already fed the row MACs' secret prefix (copied for each row)."""


def row_mac(conversation: str, position: int, message_id: str, text: str, key: bytes) -> int:
    """A stored message row's MAC, as a number: SHA-256 (which this machine's CPU runs in
    hardware, faster here than HMAC or BLAKE2b) over a 32-byte secret derived from the chain
    key, then the text's length in bytes, the conversation, the row's position, its message
    id, and its plan text. Declaring the length before the text makes the encoding
    prefix-free, so the secret-prefix hash cannot be length-extended into a longer row's MAC.
    The head keeps the sum of its rows' MACs modulo :data:`MAC_MODULUS` (a keyed multiset
    hash), so replacing one row costs subtracting its old MAC and adding its new one, and
    binding the position into each MAC makes a moved row count as changed."""
    return row_macs(conversation, key)(position, message_id, text, None)


def row_macs(conversation: str, key: bytes) -> Callable[[int, str, str, bytes | None], int]:
    """:func:`row_mac` of ``conversation``'s rows under ``key``, as a function of a row's
    position, message id, text and, when the caller has it, the text's UTF-8 (what is the same
    for every row worked out once: a reader takes the MAC of every stored row)."""
    keyed = _KEYED.get(key)
    if keyed is None:
        secret = hashlib.sha256(b"convstore-replay-row\x00" + key).digest()
        keyed = _KEYED.setdefault(key, hashlib.sha256(secret))
    copy, number, ours = keyed.copy, int.from_bytes, conversation.encode()

    def mac(position: int, message_id: str, text: str, data: bytes | None) -> int:
        if data is None:
            data = text.encode(errors="surrogatepass")
        digest = copy()
        digest.update(
            b"%d\x00%b\x00%d\x00%b\x00" % (len(data), ours, position, message_id.encode())
        )
        digest.update(data)
        return number(digest.digest(), "big")

    return mac


def head_digest(  # noqa: PLR0917 - each part of what is digested, in order
    conversation: str,
    version: int,
    changes: int,
    facts: str,
    count: int,
    total: int,
    key: bytes,
) -> str:
    """The digest a stored model's head carries: BLAKE2b (a keyed MAC with ``key``) over the
    conversation, the version folded, the log's change count then, the number of message
    rows, the sum of their :func:`row_mac` and the compactions and rewinds (``facts``). An
    edited, added, dropped or moved row, or rows of another version or conversation, do not
    match it; nor does a head of other facts or another version."""
    digest = hashlib.blake2b(digest_size=16, key=key, person=b"convstore-model2")
    digest.update(f"{conversation}\x00{version}\x00{changes}\x00{count}\x00".encode())
    digest.update(f"{total:064x}\x00{len(facts)}\x00".encode())
    digest.update(facts.encode(errors="surrogatepass"))
    return digest.hexdigest()


def row_digest(message_id: str, text: str) -> bytes:
    """A stored message row's digest under the heads written before the sum of row MACs
    (:func:`head_digest`): SHA-256 over its id and its plan text. Such a head is still read
    (:func:`model_digest`), and its model stored again in the new form by its next reader."""
    return hashlib.sha256(f"{message_id}\x00{text}".encode(errors="surrogatepass")).digest()


def model_digest(  # noqa: PLR0917 - each part of what is digested, in order
    conversation: str, version: int, changes: int, facts: str, rows: Sequence[bytes], key: bytes
) -> str:
    """The digest of a head written before :func:`head_digest`: BLAKE2b (keyed with ``key``)
    over the conversation, the version, the change count, the facts and each row's
    :func:`row_digest` in position order. Every row is hashed again on every write, so it
    is read, never written."""
    digest = hashlib.blake2b(digest_size=16, key=key, person=b"convstore-replay")
    digest.update(f"{conversation}\x00{version}\x00{changes}\x00{len(facts)}\x00".encode())
    digest.update(facts.encode(errors="surrogatepass"))
    digest.update(b"".join(rows))
    return digest.hexdigest()


def _blind_text(part: PartData) -> str:
    """A part's prose for a model that cannot see, uncleared."""
    code = part[0]
    if code in {"i", "d"}:
        return str(part[1][4])
    if code not in RESULT_CODES:
        return str(part[1])
    content = part[3]
    if isinstance(content, str):
        return str(part[1] + content)
    return str(part[1] + PART_SEPARATOR.join(map(_blind_piece, content)))


def _blind_piece(piece: str | list[Any]) -> str:
    """A piece of a result's output for a model that cannot see: its text, or the marker of
    the image or document it refers to."""
    if isinstance(piece, str):
        return piece
    return str(piece[1][4] if piece[0] == "d" else piece[4])


class ReplayState:
    """A conversation's replay read model at a version: its messages' plans in start order,
    its compactions and the rewinds in force."""

    __slots__ = (
        "changes",
        "compactions",
        "dirty",
        "legacy",
        "messages",
        "positions",
        "rewinds",
        "size",
        "total",
        "version",
    )

    def __init__(self) -> None:
        self.version = 0
        self.changes = 0
        """The conversation's count of log rows changed or deleted in place (kept by the
        store's triggers) when the state was folded: a state whose count is not the log's
        count now was folded from rows that are no longer there."""
        self.messages: list[MessagePlan] = []
        self.positions: dict[str, int] = {}
        self.compactions: list[tuple[int, str]] = []
        """(position of the message it runs through, or -1 if unknown; the summary)."""
        self.rewinds: dict[int, tuple[int, int]] = {}
        """Rewinds in force by version: the positions ``[start, end)`` each withdrew."""
        self.dirty: set[int] = set()
        """Positions of the messages changed since :meth:`clean` (what a writer must store)."""
        self.size = 0
        self.total = 0
        """The sum of the messages' :attr:`MessagePlan.mac` modulo :data:`MAC_MODULUS`: the
        rows as stored or read, extended by :meth:`rows` as changed ones are stored."""
        self.legacy = False
        """Whether it was read from a head written before :func:`head_digest` (its next
        writer stores it whole, in the new form)."""

    # -- storing ---------------------------------------------------------------------------

    def facts(self) -> dict[str, Any]:
        """The compactions, the rewinds and the rules version, as the head's JSON holds them
        (the digest covers all three)."""
        rewinds = {str(version): list(span) for version, span in sorted(self.rewinds.items())}
        return {"c": [list(c) for c in self.compactions], "r": rewinds, "v": RULES}

    def rows(
        self, conversation: str, key: bytes, positions: Iterable[int]
    ) -> list[tuple[int, str, str]]:
        """(position, message id, plan text) of the messages at ``positions``, to store, with
        :attr:`total` moved from each one's stored MAC to its new one: O(1) per row, whatever
        the conversation's length. ``positions`` must hold every :attr:`dirty` one."""
        found = []
        total = self.total
        mac_of = row_macs(conversation, key)
        for position in positions:
            message = self.messages[position]
            text = message.encode()
            mac = mac_of(position, message.message_id, text, None)
            total += mac - message.mac
            message.mac = message.fresh_mac = mac
            found.append((position, message.message_id, text))
        self.total = total % MAC_MODULUS
        return found

    def encode_head(self, conversation: str, key: bytes = b"") -> str:
        """What the state holds beside its messages, as deterministic JSON text: the
        compactions, the rewinds, the log's change count, the number of message rows and
        their MACs' sum (``s``), and the digest (:func:`head_digest`) that binds them to the
        version (``conversation`` in 32 hex digits; ``key``, the chain key, makes it a MAC).
        Messages changed since their MAC was taken are counted as they are now."""
        stale = [p for p in sorted(self.dirty) if self.messages[p].fresh_mac is None]
        if stale:
            self.rows(conversation, key, stale)
        for position in self.dirty:
            message = self.messages[position]
            assert message.fresh_mac is not None
            self.total = (self.total + message.fresh_mac - message.mac) % MAC_MODULUS
            message.mac = message.fresh_mac
        facts = _ENCODE(self.facts())
        count, total, changes = len(self.messages), self.total, self.changes
        digest = head_digest(conversation, self.version, changes, facts, count, total, key)
        # The facts' object with four more keys: what encoding it whole gives, made cheaper.
        return f'{facts[:-1]},"n":{changes},"m":{count},"s":"{total:x}","d":"{digest}"}}'

    @classmethod
    def decode(
        cls,
        conversation: str,
        version: int,
        head: str | bytes,
        rows: Iterable[tuple[str, str | bytes]],
        key: bytes = b"",
    ) -> ReplayState:
        """A state read back: its conversation's id (32 hex digits), its version, its head's
        text and (message id, plan text, or its packed form: :func:`plan_text`) of each message
        in position order. Raises
        :class:`ValueError` when the rows, the head and the version are not what a store
        wrote together (see :func:`head_digest`; a head written before it is checked as it
        was written, :func:`model_digest`): an edited or misplaced row is never rendered."""
        state = cls()
        state.version = version
        loaded = json.loads(head)
        rules = loaded.get("v", 1)
        if rules != RULES:
            msg = (
                f"the stored replay model of {conversation} was written under replay rules "
                f"{rules}; this convstore folds under rules {RULES}"
            )
            raise ValueError(msg)
        state.compactions = [(int(p), str(s)) for p, s in loaded["c"]]
        state.rewinds = {int(v): (int(s), int(e)) for v, (s, e) in loaded["r"].items()}
        state.changes = int(loaded["n"])
        stored_digest = loaded["d"]
        state.legacy = "s" not in loaded
        state.size = sum(2 * len(s) + 64 for _, s in state.compactions)
        decode, mac_of = MessagePlan.decode, row_macs(conversation, key)
        messages = state.messages
        positions = state.positions
        legacy, legacy_rows = state.legacy, []
        size = total = 0
        for position, (message_id, stored) in enumerate(rows):
            if isinstance(stored, str):
                text, data = stored, None
            else:
                data = plan_bytes(stored)
                text = data.decode(errors="surrogatepass")
            message = decode(message_id, text)
            message.mac = message.fresh_mac = mac = mac_of(position, message_id, text, data)
            total += mac
            if legacy:
                legacy_rows.append(row_digest(message_id, text))
            positions[message_id] = position
            messages.append(message)
            size += message.size
        state.size += size
        state.total = total % MAC_MODULUS
        facts = _ENCODE(state.facts())
        if state.legacy:
            expected = model_digest(conversation, version, state.changes, facts, legacy_rows, key)
        else:
            expected = head_digest(
                conversation, version, state.changes, facts, len(messages), state.total, key
            )
        if expected != stored_digest or (
            not state.legacy and (loaded["s"], loaded["m"]) != (f"{state.total:x}", len(messages))
        ):
            msg = f"the stored replay model of {conversation} does not match its digest"
            raise ValueError(msg)
        return state

    def clean(self) -> None:
        """Mark everything stored."""
        self.dirty.clear()
