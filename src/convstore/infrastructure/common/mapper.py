"""Maps convstore's pydantic events to eventsourcing's stored events and back.

Topics are convstore's own stable names (``convstore:<event type>``), not module paths, so
moving a class never makes old events unreadable.

**Stored states.** A state written by this version is *compact*: a binary header, then the
event's JSON without what the header holds::

    tag (1) | kind (1) | conversation id (16) | version (4, or 8 from 2**32 on)
        [| timestamp (8: microseconds since 1970, UTC)] [| message id (16)] | body

The tag says how the body is stored: :data:`COMPACT` as it is, :data:`COMPACT_LZ4`
LZ4-compressed (a store of format 3) or :data:`COMPACT_ZLIB` zlib-compressed (a store of
format 2), bodies of :data:`COMPRESS_FROM` bytes or more (or the backend's own threshold)
when that saves an eighth. Every reader reads every tag.
The kind byte holds the event type's stable code (:data:`KIND_CODES`) and flags saying
whether the version is long and whether the timestamp (a UTC one from 1970 on) and the
message id are in the header. The body is the event's JSON without its opening brace, the
header's fields and every model field, at any depth, left at its ``None`` default (a text
block's absent ``annotations``, say; free-form JSON keeps its nulls): ``,"index":0,…}``, or
``}``. Every field of the event union that may be ``None`` defaults to ``None``
(``tests/test_storage_format.py`` holds the union to that), so leaving them out is lossless.
A reader formats the header back into JSON in front of the body and decodes the whole with
the same adapter as ever. So each state still describes its event whole (it decodes without
the row's columns, and ``verify`` still compares it with them), in ~110 fewer
bytes than the event's JSON: ~27% fewer bytes on disk for streamed 1 KB text blocks.

States written before (the event's full JSON, always starting with ``{``) are read as they
always were: both forms live side by side in one log, each row saying which it is by its first
byte. A store of format 1 (which convstore 0.2.0 shares) is still written in that form: its
mapper is made with ``compact=False`` (see ``convstore.infrastructure.common.application``).
:func:`event_json` (and the mapper's ``plain``) turns either into the event's full JSON, the
bytes the earlier form stored, which is what ``dump`` and ``export --format jsonl`` write.
eventsourcing's ``COMPRESSOR_TOPIC`` / ``CIPHER_KEY`` settings still apply on top (with a
compressor set, the body is not compressed twice).
"""

from __future__ import annotations

import functools
import types
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import (
    Cipher,
    Compressor,
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
)
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from convstore.domain.events import EVENT_ADAPTER, EVENT_CLASSES, BlockRecorded, Event

TOPIC_PREFIX = "convstore:"


@functools.cache
def topic_of(event_class: type[BaseModel]) -> str:
    """The stored topic of an event class (cached: it is asked once per event written)."""
    return TOPIC_PREFIX + str(event_class.model_fields["type"].default)


TOPICS: frozenset[str] = frozenset(topic_of(cls) for cls in EVENT_CLASSES)

COMPACT = 1
"""First byte of a compact state whose body is stored as it is."""
COMPACT_ZLIB = 2
"""First byte of a compact state whose body is zlib-compressed: what a store of format 2
writes, as convstore 0.3.0 does."""
COMPACT_LZ4 = 3
"""First byte of a compact state whose body is LZ4-compressed (LZ4's block format, the
body's size in four little-endian bytes in front): what a store of format 3 writes. Measured
on the agent benchmark's 1,000 compressed bodies (1.39 MB, 2026-12-07): LZ4 inflates them in
0.73 ms against ISA-L's zlib 4.5 ms (a fresh process's first load of that conversation
takes ~26 ms and inflates every one), deflates them in 2.8 ms against 8.5 ms, to 947 KB
against 618 KB; the store stays under the raw rows' bytes (see the benchmarks page)."""

COMPRESS_FROM = 2048
"""Bodies of at least this many bytes are compressed (when that saves an eighth or more),
unless the backend says otherwise (:attr:`convstore.ports.backend.Backend.compress_from`).

From 2 KB on, real tool results and answers shrink to 30-50%. Below it the saving cost
CPU on the append path, where PostgreSQL's and NATS's throughput targets are measured, when
it was chosen (the standard library's zlib: ~26 µs for a 600-byte body, ~55 µs for a 1 KB
one; LZ4 takes a tenth of that). SQLite stores, whose host's disk holds the store, compress
from 512 bytes."""

COMPRESS_LEVEL = 1
"""zlib's fastest level, which compresses the shared corpus's long transcript lines a
quarter faster than its default (6) to bodies 5% larger (0.51 of the raw bytes, not 0.48);
ISA-L's level 1 (see :func:`_zlib`) compresses the agent benchmark's bodies 3.4x faster
than zlib's level 1, to bodies 2% smaller (its level 0 is faster still but 27% larger).
Reading is the same at every level, so stores written at another level, or by the other
library, read unchanged."""


Deflate = Callable[[bytes, int], bytes]
Inflate = Callable[[bytes], bytes]


@functools.cache
def _zlib() -> tuple[Deflate, Inflate, tuple[type[Exception], ...]]:
    """How zlib bodies (:data:`COMPACT_ZLIB`) are written and read: through ISA-L's
    implementation of zlib (the ``isal`` package, a dependency) where it is installed, else
    the standard library's. The streams are the same format either way: each reads what the
    other wrote, so the library never shows in a store. ISA-L, measured on the 1,000 bodies
    of the agent benchmark's store (1.39 MB, 2026-12-07): inflating 7.5 ms against zlib's
    12.2 ms; deflating 10 ms against 34 ms; its import ~1 ms, paid on first use (a store of
    format 3, whose bodies are LZ4, never pays it)."""
    try:
        from isal import isal_zlib  # noqa: PLC0415 - the fallback needs the try
    except ImportError:  # a platform without its wheel
        return zlib.compress, zlib.decompress, (zlib.error,)
    failed: type[Exception] = isal_zlib.error  # type: ignore[assignment] # a class, stubbed as an instance
    return isal_zlib.compress, isal_zlib.decompress, (zlib.error, failed)


def zlib_library() -> str:
    """The module that writes and reads zlib bodies in this process (``isal.isal_zlib``, or
    ``zlib`` where isal is not installed)."""
    return _zlib()[1].__module__ or "zlib"


def deflate(body: bytes, level: int) -> bytes:
    """A body as a zlib stream (:data:`COMPACT_ZLIB`)."""
    return _zlib()[0](body, level)


def inflate(packed: bytes) -> bytes:
    """The body :func:`deflate` (or any zlib) packed; ``ValueError`` for one that is not a
    zlib stream."""
    _deflate, read, failures = _zlib()
    try:
        return read(packed)
    except failures as exc:
        raise ValueError(str(exc)) from None


@functools.cache
def _lz4() -> types.ModuleType:
    """LZ4's block functions, imported on first use (~0.8 ms): a process that reads no
    compressed body of a store of format 3 never pays it."""
    from lz4 import block  # noqa: PLC0415 - on first use

    module: types.ModuleType = block
    return module


LZ4_MAX_RATIO = 255
"""LZ4's block format cannot expand a body more than ~255 times (each byte of a match's
length adds at most 255 bytes): an LZ4 body whose size field says more is damaged, and is
refused before the size is allocated."""


def lz4_pack(body: bytes) -> bytes:
    """A body in LZ4's block format, its size in front (:data:`COMPACT_LZ4`)."""
    packed: bytes = _lz4().compress(body, store_size=True)
    return packed


def lz4_unpack(packed: bytes) -> bytes:
    """The body :func:`lz4_pack` packed; ``ValueError`` for one that does not unpack."""
    size = int.from_bytes(packed[:4], "little")
    if len(packed) < 5 or size > LZ4_MAX_RATIO * len(packed):
        msg = f"an LZ4 body of {len(packed)} bytes cannot hold {size:,} bytes"
        raise ValueError(msg)
    block = _lz4()
    try:
        body: bytes = block.decompress(packed)
    except block.LZ4BlockError as exc:
        raise ValueError(str(exc)) from None
    return body


def unpacked(tag: int, body: bytes) -> bytes:
    """A compact state's body (after its header) as JSON, whichever way its ``tag`` says it
    is stored; raises ``ValueError`` when it does not inflate."""
    if tag == COMPACT:
        return body
    if tag == COMPACT_LZ4:
        return lz4_unpack(body)
    return inflate(body)


KIND_CODES: tuple[str, ...] = (
    "conversation_started",
    "message_started",
    "block_appended",
    "message_ended",
    "message_interrupted",
    "compacted",
    "rewound",
    "rewind_undone",
    "entries_recorded",
    "entries_deleted",
    "conversation_renamed",
    "labels_set",
    "labels_removed",
    "message_meta_recorded",
    "block_recorded",
)
"""Each event type's code in a compact state's kind byte: its place here, from 1. Stored in
every compact state, so the list only ever grows at its end."""

_MESSAGE_ID_IN_HEADER = 0x80
_TIMESTAMP_IN_HEADER = 0x40
_LONG_VERSION = 0x20
"""The version takes 8 bytes, not 4 (from 2³² on)."""
KIND_MASK = 0x1F
_MAX_HEADER_SECONDS = 10**10
"""Timestamps from 1970 up to this (the year 2286) go in the header: pydantic reads a number
of seconds as milliseconds from 2e10 on."""

_CODE_OF = {kind: code for code, kind in enumerate(KIND_CODES, start=1)}


def _head(kind: str, flags: int) -> bytes:
    """The format of the JSON a compact state's header stands for, up to its body."""
    head = b'{"originator_id":"%b","originator_version":%d,"type":"' + kind.encode() + b'"'
    if flags & _TIMESTAMP_IN_HEADER:
        head += b',"timestamp":%d.%06d'
    if flags & _MESSAGE_ID_IN_HEADER:
        head += b',"message_id":"%b"'
    return head


_HEADS = {
    code | flags: _head(kind, flags)
    for kind, code in _CODE_OF.items()
    for flags in range(0, 0x100, _LONG_VERSION)
}
"""The JSON format of every possible kind byte's header (a body follows it, without its
opening brace: ``,"index":1,…}``, or ``}`` when empty)."""

_LAYOUTS = {
    kind: (
        head,
        version_end := 26 if kind & _LONG_VERSION else 22,
        bool(kind & _TIMESTAMP_IN_HEADER),
        bool(kind & _MESSAGE_ID_IN_HEADER),
        version_end
        + (8 if kind & _TIMESTAMP_IN_HEADER else 0)
        + (16 if kind & _MESSAGE_ID_IN_HEADER else 0),
    )
    for kind, head in _HEADS.items()
}
"""Per kind byte: the header's JSON format, where the version ends, whether the timestamp and
the message id follow it, and where the body starts."""
_EVENT_TYPES = {str(cls.model_fields["type"].default) for cls in EVENT_CLASSES}
if set(KIND_CODES) != _EVENT_TYPES or len(KIND_CODES) > KIND_MASK:  # pragma: no cover
    msg = f"KIND_CODES must list every event type once: {sorted(_EVENT_TYPES ^ set(KIND_CODES))}"
    raise RuntimeError(msg)

_IN_HEADER = frozenset({"originator_id", "originator_version", "type"})
_ZERO = timedelta(0)
_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnreadableEvent(ValueError):
    """An event that cannot be stored (no JSON for one of its values, a version past the
    header's range, a block event in a store of an earlier format); nothing is stored."""


def compact_state(
    event: BaseModel,
    *,
    compress: bool = True,
    compress_from: int = COMPRESS_FROM,
    packed_tag: int = COMPACT_ZLIB,
) -> bytes:
    """The event's compact state (see the module's notes), its body compressed from
    ``compress_from`` bytes (when ``compress``, and when that saves an eighth) as
    ``packed_tag`` says (:data:`COMPACT_ZLIB` or :data:`COMPACT_LZ4`). Raises
    :class:`UnreadableEvent` saying why when it has none.

    Encoded once and not read back: every value reaching here was checked at the edge
    (:func:`~convstore.domain.parsing.parse_block`, ``parse_meta``, the entries' check:
    JSON types only, no NaN, integers and nesting within the JSON reader's range), and
    ``tests/test_read_back.py`` holds, for every event kind and every block kind, that what
    the edge accepts decodes back equal.
    """
    originator = getattr(event, "originator_id", None)
    version = getattr(event, "originator_version", None)
    if not isinstance(originator, UUID) or not isinstance(version, int) or not 0 < version < 2**63:
        msg = "its conversation id or version cannot be stored"
        raise UnreadableEvent(msg)
    kind = _CODE_OF[str(getattr(event, "type", ""))]
    exclude = set(_IN_HEADER)
    if version >= 2**32:
        kind |= _LONG_VERSION
        header = originator.bytes + version.to_bytes(8, "big")
    else:
        header = originator.bytes + version.to_bytes(4, "big")
    timestamp = getattr(event, "timestamp", None)
    if isinstance(timestamp, datetime) and timestamp.utcoffset() == _ZERO:
        micros = (timestamp - _EPOCH) // _MICROSECOND
        if 0 <= micros < _MAX_HEADER_SECONDS * 1_000_000:
            kind |= _TIMESTAMP_IN_HEADER
            header += micros.to_bytes(8, "big")
            exclude.add("timestamp")
    message_id = getattr(event, "message_id", None)
    if isinstance(message_id, UUID):
        kind |= _MESSAGE_ID_IN_HEADER
        header += message_id.bytes
        exclude.add("message_id")
    try:
        dumped = event.model_dump_json(exclude=exclude, exclude_none=True).encode()
    except PydanticSerializationError as exc:
        msg = f"it cannot be written as JSON ({' '.join(str(exc).split())[:200]})"
        raise UnreadableEvent(msg) from None
    body = b"}" if dumped == b"{}" else b"," + dumped[1:]
    state = bytes((COMPACT, kind)) + header + body
    if compress and len(body) >= compress_from:
        packed = lz4_pack(body) if packed_tag == COMPACT_LZ4 else deflate(body, COMPRESS_LEVEL)
        if len(packed) <= len(body) - len(body) // 8:
            return bytes((packed_tag, kind)) + header + packed
    return state


def checked_json(event: BaseModel) -> bytes:
    """The event's full JSON (``model_dump_json()``: a format-1 store's state, as convstore
    0.2.0 writes it); refused as :func:`compact_state` refuses, with
    :class:`UnreadableEvent` saying why."""
    try:
        state = event.model_dump_json().encode()
    except PydanticSerializationError as exc:
        msg = f"it cannot be written as JSON ({' '.join(str(exc).split())[:200]})"
        raise UnreadableEvent(msg) from None
    return state


def layout_of(state: bytes) -> tuple[bytes, int, bool, bool, int]:
    """The header layout (:data:`_LAYOUTS`) of a well-formed compact state; ``ValueError``
    for anything else."""
    try:
        layout = _LAYOUTS[state[1]]
    except (IndexError, KeyError):
        msg = "not a compact state (cut short, or an unknown event kind)"
        raise ValueError(msg) from None
    tag = state[0]
    if len(state) <= layout[4] or not COMPACT <= tag <= COMPACT_LZ4:
        msg = f"not a well-formed compact state (first byte {tag}, {len(state)} bytes)"
        raise ValueError(msg)
    return layout


def compact_version(state: bytes) -> int | None:
    """The version in a compact state's header, read without decoding the event; ``None``
    for a state that is not a well-formed compact one."""
    try:
        version_end = layout_of(state)[1]
    except ValueError:
        return None
    return int.from_bytes(state[18:version_end], "big")


def full_json(state: bytes) -> bytes:
    """The JSON a compact state's event is read from (all its fields but the defaulted ones),
    built from the header and the body without decoding the event.

    Raises ``ValueError`` for a state that is not a well-formed compact one.
    """
    head, version_end, timestamp, message_id, at = layout_of(state)
    tag = state[0]
    # One format per layout with every value at once: fewer steps than piece by piece.
    originator, version = state[2:18].hex().encode(), int.from_bytes(state[18:version_end], "big")
    if timestamp:
        seconds, micros = divmod(int.from_bytes(state[version_end : version_end + 8], "big"), 10**6)
        if message_id:
            head %= (
                originator,
                version,
                seconds,
                micros,
                state[version_end + 8 : at].hex().encode(),
            )
        else:
            head %= (originator, version, seconds, micros)
    elif message_id:
        head %= (originator, version, state[version_end:at].hex().encode())
    else:
        head %= (originator, version)
    if tag == COMPACT:
        return head + state[at:]
    try:
        return head + unpacked(tag, state[at:])
    except ValueError as exc:
        msg = f"a compressed state does not inflate ({exc})"
        raise ValueError(msg) from None


def decode_compact(state: bytes) -> Event:
    """The event a compact state holds (``ValueError``, a ``ValidationError`` among them, when
    it does not decode)."""
    return EVENT_ADAPTER.validate_json(full_json(state))


def event_json(state: bytes) -> bytes:
    """A state (without eventsourcing's cipher or compressor) as its event's full JSON: a
    state stored as JSON as it is, a compact one decoded and written out as the event's JSON,
    the very bytes the earlier form would have stored."""
    if state[:1] == b"{":
        return state
    return decode_compact(state).model_dump_json().encode()


class PydanticMapper(Mapper[UUID]):
    """Stores each event as its compact state (or, with ``compact=False``, as its full JSON,
    for a format-1 store); reads both forms through one discriminated-union adapter."""

    def __init__(
        self,
        transcoder: Transcoder,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
        *,
        compact: bool = True,
        compress_from: int = COMPRESS_FROM,
        block_events: bool = False,
        packed_tag: int = COMPACT_ZLIB,
    ) -> None:
        super().__init__(transcoder, compressor=compressor, cipher=cipher)
        self.compact = compact
        """Whether events are written as compact states, or as their full JSON."""
        self.block_events = block_events
        """Whether the store's format records a message as its block events
        (:class:`~convstore.domain.events.BlockRecorded`, format 3): a store of an earlier
        format refuses them, since the versions that share it could not read them."""
        self.compress_from = compress_from
        """A compact state's body is compressed from this many bytes."""
        self.packed_tag = packed_tag
        """How a compressed body is written (:data:`COMPACT_LZ4` in a store of format 3,
        :data:`COMPACT_ZLIB` in one of format 2, as 0.3.0 writes it)."""

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        assert isinstance(domain_event, BaseModel)
        if isinstance(domain_event, BlockRecorded) and not self.block_events:
            msg = (
                "block events need a store of format 3, and this store is of an earlier "
                "format, which older versions that cannot read them share"
            )
            raise UnreadableEvent(msg)
        if self.compact:
            state = compact_state(
                domain_event,
                compress=not self.compressor,
                compress_from=self.compress_from,
                packed_tag=self.packed_tag,
            )
        else:
            state = checked_json(domain_event)
        if self.compressor:
            state = self.compressor.compress(state)
        if self.cipher:
            state = self.cipher.encrypt(state)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic_of(type(domain_event)),
            state=state,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Event:
        return self.decode(stored_event)

    def decode_state(self, state: bytes) -> Event:
        """The event a stored state holds (decompressed and decrypted as configured), in
        either form."""
        plain = self.unwrapped(state)
        if plain[:1] == b"{":
            return EVENT_ADAPTER.validate_json(plain)
        return decode_compact(plain)

    def version_in_header(self, state: bytes) -> int | None:
        """The version a stored compact state's header holds, read without decoding its event
        (so without building the event models); ``None`` for a state it cannot be read from
        so (encrypted or compressed by eventsourcing, a full-JSON state, a malformed one)."""
        if self.cipher or self.compressor:
            return None
        return compact_version(state)

    def decode(self, stored_event: StoredEvent) -> Event:
        """The event a stored record holds; raises ``MapperDeserialisationError`` if it can't."""
        try:
            return self.decode_state(stored_event.state)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            detail = (
                f"{exc.error_count()} problem(s), first at {where or 'the top'}: {first['msg']}"
            )
            raise MapperDeserialisationError(self._undecodable(stored_event, detail)) from exc
        except ValueError as exc:
            raise MapperDeserialisationError(self._undecodable(stored_event, str(exc))) from exc

    @staticmethod
    def _undecodable(stored_event: StoredEvent, detail: str) -> str:
        return (
            f"stored event {stored_event.originator_id} v{stored_event.originator_version} "
            f"({stored_event.topic}) does not decode: {detail}"
        )

    def plain(self, state: bytes) -> bytes:
        """A stored state as its event's full JSON: a state stored as JSON as it is, a
        compact one decoded and written out as the event's JSON (the same bytes the earlier
        form would have held)."""
        return event_json(self.unwrapped(state))

    def unwrapped(self, state: bytes) -> bytes:
        """A stored state decrypted and decompressed as eventsourcing's settings say."""
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return state
