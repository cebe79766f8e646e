"""PostgreSQL: one store shared by many runtime hosts, through eventsourcing's recorder.

A store is named by a URL::

    postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME[?schema=S&pool_size=N&max_overflow=N
                                                   &connect_timeout=S&lock_timeout=S]

The events live in the table ``convstore_events`` of the chosen schema (``public`` by default),
created on first use; give each store its own schema to keep several in one database.
"""

from __future__ import annotations

import getpass
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from convstore.errors import InvalidInput

SCHEMES = ("postgresql", "postgres")

DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_LOCK_TIMEOUT_SECONDS = 10

_INT_OPTIONS = ("pool_size", "max_overflow", "connect_timeout", "lock_timeout")


def is_postgres_url(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL store rather than a SQLite file."""
    return location.split("://", 1)[0] in SCHEMES and "://" in location


def redact(url: str) -> str:
    """The URL with any password replaced by ``***``, safe to print and log.

    Works on the raw text, not a parse: a password holding an unencoded ``/``, ``?`` or ``#``
    would fool a URL parser into showing part of it. Everything between the first ``:`` after
    ``//`` and the last ``@`` is masked, which masks too much rather than too little.
    """
    scheme, separator, rest = url.partition("://")
    at = rest.rfind("@")
    if not separator or at < 0 or ":" not in rest[:at]:
        return url
    user = rest[: rest.index(":")]
    return f"{scheme}://{user}:***{rest[at:]}"


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    """Where a PostgreSQL store is and how to connect to it."""

    dbname: str
    host: str = "localhost"
    port: int = 5432
    user: str = ""
    password: str = ""
    schema: str = "public"
    pool_size: int = DEFAULT_POOL_SIZE
    max_overflow: int = DEFAULT_MAX_OVERFLOW
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT_SECONDS
    lock_timeout: int = DEFAULT_LOCK_TIMEOUT_SECONDS

    @classmethod
    def from_url(cls, url: str) -> PostgresSettings:
        """Parse a ``postgresql://`` URL; raises :class:`InvalidInput` naming what is wrong."""
        shown = redact(url)
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            msg = f"not a PostgreSQL URL: {shown}"
            raise InvalidInput(msg)
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname:
            msg = f"the URL names no database (postgresql://USER@HOST:PORT/DBNAME): {shown}"
            raise InvalidInput(msg)
        try:
            port = parts.port or 5432
            username, password, hostname = parts.username, parts.password, parts.hostname
        except ValueError:
            msg = f"the URL's host or port cannot be read (encode special characters): {shown}"
            raise InvalidInput(msg) from None
        options: dict[str, int] = {}
        schema = "public"
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key == "schema" and value:
                schema = value
            elif key in _INT_OPTIONS and value.isdigit():
                options[key] = int(value)
            else:
                known = ", ".join(("schema", *_INT_OPTIONS))
                msg = f"bad URL option {key}={value!r} (options: {known}): {shown}"
                raise InvalidInput(msg)
        return cls(
            dbname=dbname,
            host=hostname or "localhost",
            port=port,
            user=unquote(username) if username else getpass.getuser(),
            password=unquote(password or ""),
            schema=schema,
            **options,
        )

    def env(self) -> dict[str, str]:
        """The eventsourcing settings for this store."""
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password,
            "POSTGRES_SCHEMA": self.schema,
            "POSTGRES_POOL_SIZE": str(self.pool_size),
            "POSTGRES_MAX_OVERFLOW": str(self.max_overflow),
            "POSTGRES_CONNECT_TIMEOUT": str(self.connect_timeout),
            "POSTGRES_LOCK_TIMEOUT": str(self.lock_timeout),
            # Keeps each conversation's chained head (see convstore.infrastructure.chain).
            "APPLICATION_RECORDER_TOPIC": (
                "convstore.infrastructure.postgres_recorder:ChainedPostgresRecorder"
            ),
        }

    @contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Hold the store's setup lock, with its schema created, for the duration.

        eventsourcing creates its tables and functions when a store is opened; two processes
        doing that at once make PostgreSQL fail one of them ("tuple concurrently updated").
        A session advisory lock per schema makes them take turns.
        """
        import psycopg  # noqa: PLC0415 - only PostgreSQL stores need the driver
        from psycopg import sql  # noqa: PLC0415

        digest = hashlib.sha256(f"convstore setup {self.schema}".encode()).digest()
        key = int.from_bytes(digest[:8], "big", signed=True)
        with psycopg.connect(
            dbname=self.dbname,
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            connect_timeout=self.connect_timeout,
            autocommit=True,
        ) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            yield
