"""Where a ``nats://`` store is: its servers, its stream, its local replica.

A store is named by a URL::

    nats://[USER[:PASSWORD]@]HOST[:PORT][,HOST[:PORT]…][/NAME][?replica=PATH&replicas=N
                                                                &timeout=S&partitions=P]

``NAME`` (letters, digits, ``-`` and ``_``; ``convstore`` by default) is the stream, and the
prefix of its subjects. ``replicas`` is the stream's replica count when it is created (3 by
default: a 3-server cluster; 1 for a single server). ``replica`` is the local SQLite file the
read models live in; by default one in the data directory named after the URL (without the
password), so each host, and each store, keeps its own. ``timeout`` (seconds, default 20) is
how long a request waits for the stream (a leader election takes a few). ``partitions`` (1 by
default) spreads the conversations over that many streams, ``NAME-p0`` … ``NAME-p{P-1}``, each
with a leader of its own: a store keeps the count it was made with, and opening it with another
is refused.

Imports no client: the registry shows a location with this module alone.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote
from uuid import UUID

from convstore.domain.errors import InvalidInput
from convstore.infrastructure.common.locations import data_directory, redact

DEFAULT_STREAM = "convstore"
DEFAULT_PORT = 4222
DEFAULT_REPLICAS = 3
DEFAULT_TIMEOUT_SECONDS = 20

_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HOST = re.compile(r"[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]")
_OPTIONS = ("replica", "replicas", "timeout", "partitions")
MAX_PARTITIONS = 64


@dataclass(frozen=True, slots=True)
class NatsLocation:
    """A parsed ``nats://`` URL."""

    servers: tuple[str, ...]
    """Each server as ``nats://HOST:PORT``."""
    stream: str
    replica: Path
    replicas: int = DEFAULT_REPLICAS
    timeout: int = DEFAULT_TIMEOUT_SECONDS
    user: str = ""
    password: str = ""
    partitions: int = 1

    @property
    def streams(self) -> tuple[str, ...]:
        """The store's streams: ``NAME`` alone, or one per partition."""
        return stream_names(self.stream, self.partitions)

    @classmethod
    def parse(cls, url: str) -> NatsLocation:
        """Read a ``nats://`` URL; raises :class:`InvalidInput` (one line, no secret)."""
        shown = redact(url)
        scheme, separator, rest = url.partition("://")
        if not separator or scheme.lower() != "nats":
            msg = f"not a NATS URL: {shown}"
            raise InvalidInput(msg)
        rest, _q, query = rest.partition("?")
        at = rest.rfind("@")
        credentials, rest = (rest[:at], rest[at + 1 :]) if at >= 0 else ("", rest)
        user, _colon, password = credentials.partition(":")
        hosts, _slash, stream = rest.partition("/")
        stream = unquote(stream) or DEFAULT_STREAM
        if not _STREAM_NAME.fullmatch(stream):
            msg = (
                "the stream name (after the servers) must be 1 to 64 letters, digits, '-' or"
                f" '_': {shown}"
            )
            raise InvalidInput(msg)
        servers = tuple(_server(host, shown) for host in hosts.split(","))
        options = _options(query, shown)
        replica = options.get("replica") or str(default_replica(_without_secret(shown)))
        return cls(
            servers=servers,
            stream=stream,
            replica=Path(replica),
            replicas=_whole(options, "replicas", DEFAULT_REPLICAS, (1, 5), shown),
            timeout=_whole(options, "timeout", DEFAULT_TIMEOUT_SECONDS, (1, 3600), shown),
            user=unquote(user),
            password=unquote(password),
            partitions=_whole(options, "partitions", 1, (1, MAX_PARTITIONS), shown),
        )


def stream_names(stream: str, partitions: int) -> tuple[str, ...]:
    """The streams of a store named ``stream`` with ``partitions`` partitions."""
    if partitions == 1:
        return (stream,)
    return tuple(f"{stream}-p{k}" for k in range(partitions))


def partition_of(conversation: UUID, partitions: int) -> int:
    """The partition a conversation's events live in, for the store's life: its id's number
    modulo the count (ids are random, or digests for imports, so they spread evenly)."""
    return conversation.int % partitions


def _without_secret(shown: str) -> str:
    """The shown URL without its user part or options: what names the store itself."""
    rest = shown.split("://", 1)[1].split("?", 1)[0]
    return rest[rest.rfind("@") + 1 :]


def default_replica(store: str) -> Path:
    """The replica's file in the data directory, a one-to-one function of ``store`` (the
    servers and the stream): a readable part, and a digest of the whole."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", store).strip("-")[:120]
    digest = hashlib.sha256(store.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return data_directory() / f"nats-{slug}-{digest}.db"


def _server(host: str, shown: str) -> str:
    name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not colon:
        name, port = host, str(DEFAULT_PORT)
    if not _HOST.fullmatch(name) or not (port.isascii() and port.isdigit()):
        msg = f"each server is HOST or HOST:PORT, separated by ',': {shown}"
        raise InvalidInput(msg)
    if not 0 < int(port) < 65536:
        msg = f"port {port} is out of range: {shown}"
        raise InvalidInput(msg)
    return f"nats://{name}:{int(port)}"


def _options(query: str, shown: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _OPTIONS:
            name = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", key) else "(unreadable)"
            msg = f"bad URL option {name} (options: {', '.join(_OPTIONS)}): {shown}"
            raise InvalidInput(msg)
        if key in options:
            msg = f"the URL gives option {key} twice: {shown}"
            raise InvalidInput(msg)
        options[key] = value
    return options


def _whole(
    options: dict[str, str], key: str, default: int, bounds: tuple[int, int], shown: str
) -> int:
    value = options.get(key)
    if value is None:
        return default
    low, high = bounds
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        msg = f"URL option {key} must be a whole number from {low} to {high}: {shown}"
        raise InvalidInput(msg)
    return int(value)
