"""Hash chains over each conversation's stored events, and the head row that anchors them.

Every insert also writes, in the same transaction, the conversation's *head*: the newest version
and the chain hash over every stored event from ``chained_from`` up to it. Each link hashes the
previous link, the version, the topic and the stored state (the exact bytes in the table), so
changing, removing, reordering or adding a stored event changes the chain, and an event lost
from the end leaves the head ahead of the log. ``convstore verify`` recomputes both.

The heads live in their own table: one small row per conversation, nothing added to events.
One row with the nil id is the *start marker*: the log position at which chaining began. A
conversation with events after it but no head lost its head; one with none after it was
written before chains existed, and is reported as unchained, not as damage.

The hash is BLAKE2b with a 16-byte digest. Unkeyed, it detects accidental damage and naive
tampering; whoever can rewrite the file can recompute it. With ``CONVSTORE_CHAIN_KEY`` set (for
every writer and for ``verify``), each link is a keyed BLAKE2b MAC, which cannot be recomputed
without the key. The writer and ``verify`` use the same code, so the link's format is fixed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from uuid import UUID

from convstore.domain.parsing import NIL_ID

HEADS_TABLE = "convstore_heads"
"""The table of heads, beside the events (in the same schema on PostgreSQL)."""

START_MARKER_ID: UUID = NIL_ID
"""The id of the row whose ``version`` is the log position where chaining began: the nil
UUID, which no conversation can have (``Conversation.start`` refuses it), so the marker never
shares its row with a conversation's head."""

CHAIN_SINCE = "v0.2"
"""The first convstore release that writes chains: older conversations are "unchained"."""

KEY_ENV_VAR = "CONVSTORE_CHAIN_KEY"
"""Set it to any secret text to make each link a keyed MAC; unset, links are plain hashes."""

_DIGEST_SIZE = 16
_GENESIS_PERSON = b"convstore-chain1"  # BLAKE2b personalisation: at most 16 bytes


@dataclass(frozen=True, slots=True)
class Head:
    """A conversation's head: its newest version and the chain hash up to it.

    ``chained_from`` is the first version the chain covers (1, or the first version appended
    after an upgrade); ``restarted_after`` is the version the head held when a write found it
    out of step with the log and started the chain again, else ``None``.
    """

    version: int
    chain: bytes
    chained_from: int
    restarted_after: int | None = None


def chain_key() -> bytes:
    """The MAC key from ``$CONVSTORE_CHAIN_KEY`` (any text, hashed to 32 bytes), or ``b""``."""
    secret = os.environ.get(KEY_ENV_VAR, "")
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest() if secret else b""


def genesis(conversation_id: UUID) -> bytes:
    """The link before a conversation's first chained event."""
    return hashlib.blake2b(
        conversation_id.bytes, digest_size=_DIGEST_SIZE, person=_GENESIS_PERSON
    ).digest()


def link(previous: bytes, version: int, topic: bytes, state: bytes, key: bytes = b"") -> bytes:
    """The chain hash after one stored event, from the one before it (keyed when ``key``)."""
    digest = hashlib.blake2b(previous, digest_size=_DIGEST_SIZE, key=key)
    digest.update(version.to_bytes(8, "big", signed=True))
    digest.update(len(topic).to_bytes(4, "big"))
    digest.update(topic)
    digest.update(state)
    return digest.digest()


def advance(
    conversation_id: UUID,
    head: Head | None,
    events: list[tuple[int, str, bytes]],
    key: bytes = b"",
) -> Head:
    """The head after appending ``events`` (version, topic, state), in version order.

    A missing head starts a chain at the first new version (a new conversation, or an old one
    written before chains). A head that is not exactly one version behind the first new event
    is out of step with the log (events were removed or added outside this code, or by an
    older convstore): the chain starts again there, and the head keeps the version it held so
    ``verify`` can report it.
    """
    first = events[0][0]
    restarted_after = head.restarted_after if head is not None else None
    if head is not None and head.version == first - 1:
        chain, chained_from = head.chain, head.chained_from
    else:
        chain, chained_from = genesis(conversation_id), first
        if head is not None:
            restarted_after = head.version
    for version, topic, state in events:
        chain = link(chain, version, topic.encode("utf-8", "surrogateescape"), state, key)
    return Head(events[-1][0], chain, chained_from, restarted_after)
