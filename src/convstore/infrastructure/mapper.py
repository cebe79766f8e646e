"""Maps convstore's pydantic events to eventsourcing's stored events and back.

Topics are convstore's own stable names (``convstore:<event type>``), not module paths, so
moving a class never makes old events unreadable. The state is the event's JSON, compressed
and encrypted when eventsourcing's ``COMPRESSOR_TOPIC`` / ``CIPHER_KEY`` settings ask for it.
"""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, MapperDeserialisationError, StoredEvent
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from convstore.domain.events import EVENT_ADAPTER, EVENT_CLASSES, Event

TOPIC_PREFIX = "convstore:"


def topic_of(event_class: type[BaseModel]) -> str:
    """The stored topic of an event class."""
    return TOPIC_PREFIX + str(event_class.model_fields["type"].default)


TOPICS: frozenset[str] = frozenset(topic_of(cls) for cls in EVENT_CLASSES)


class UnreadableEvent(ValueError):
    """An event whose stored JSON would not read back as the same event; nothing is stored."""


def checked_json(event: BaseModel) -> bytes:
    """The event's JSON, once it is known to decode back to an equal event.

    The check goes through the very adapter every reader uses, so whatever is accepted can be
    read back: a value the JSON reader refuses (an integer past its range, nesting past its
    depth) or one that would come back different is refused here instead of being stored.
    Raises :class:`UnreadableEvent` saying why.
    """
    try:
        state = event.model_dump_json().encode()
    except PydanticSerializationError as exc:
        msg = f"it cannot be written as JSON ({' '.join(str(exc).split())[:200]})"
        raise UnreadableEvent(msg) from None
    try:
        back = EVENT_ADAPTER.validate_json(state)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        msg = f"its JSON would not read back ({first['msg']})"
        raise UnreadableEvent(msg) from None
    if back != event:
        msg = "its JSON would read back as a different value"
        raise UnreadableEvent(msg)
    return state


class PydanticMapper(Mapper[UUID]):
    """Stores each event as its JSON; reads it back through one discriminated-union adapter."""

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        assert isinstance(domain_event, BaseModel)
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
        """The event a stored state holds (decompressed and decrypted as configured)."""
        return EVENT_ADAPTER.validate_json(self.plain(state))

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
        """A stored state decompressed and decrypted as configured."""
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return state
