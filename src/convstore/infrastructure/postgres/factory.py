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
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from convstore.domain.errors import InvalidInput, NoStore
from convstore.infrastructure.common.application import (
    APPLICATION_NAME,
    COMPACT_FORMAT,
    FULL_JSON_FORMAT,
    IDENTITY_KEY,
    MARKER_TABLE,
    READS,
    STORE_FORMAT,
    StoreMarker,
    known_format,
    new_identity,
)
from convstore.infrastructure.common.locations import redact as redact  # noqa: PLC0414
from convstore.infrastructure.common.locations import url_scheme as url_scheme  # noqa: PLC0414
from convstore.infrastructure.common.mapper import TOPIC_PREFIX

if TYPE_CHECKING:
    import psycopg

EVENTS_TABLE = f"{APPLICATION_NAME}_events"

SCHEMES = ("postgresql", "postgres")
"""URL schemes naming a PostgreSQL store, in any case, as libpq reads them; SQLAlchemy's
``postgresql+DRIVER`` (``postgresql+psycopg``, ``postgresql+psycopg2`` …) is accepted too: the
URL means the same server whatever driver it names, and convstore connects with psycopg."""

DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 10
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
DEFAULT_LOCK_TIMEOUT_SECONDS = 10

MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL keeps the first 63 bytes of a name and silently drops the rest."""

_INT_OPTIONS = {
    "pool_size": (1, 1000),
    "max_overflow": (0, 1000),
    "connect_timeout": (1, 3600),
    "lock_timeout": (1, 24 * 60 * 60),
}
"""Whole-number URL options and the range each accepts."""

_OPTIONS = ("schema", "password", *_INT_OPTIONS)

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_$]*")
_OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


_MANGLED = re.compile(r"(?i)postgres(?:ql)?(?:\+[a-z0-9_]+)?:/?(?!/)")


def refuse_mangled_url(location: str) -> None:
    """Refuse ``postgresql:/…`` (a URL passed through ``pathlib.Path``, which folds ``//``)
    rather than make it a file path that shows the password in every message."""
    if _MANGLED.match(location):
        scheme, _colon, rest = location.partition(":")
        shown = redact(f"{scheme}://{rest.lstrip('/')}")
        msg = (
            f"{shown} looks like a PostgreSQL URL without the '//' after its scheme"
            " (a pathlib.Path drops one '/'): pass the URL as text"
        )
        raise InvalidInput(msg)


def is_postgres_url(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL store rather than a SQLite file."""
    scheme = url_scheme(location)
    return scheme is not None and scheme.split("+", 1)[0] in SCHEMES


def check_schema_name(schema: str) -> None:
    """Refuse a schema name the server would change: truncate (over 63 bytes), fold to lower
    case (convstore quotes names, so ``Prod`` would be a schema apart from ``prod``), or
    refuse (``pg_…``, dots, spaces), so two names never reach one store and a refused one
    creates nothing."""
    if len(schema.encode("utf-8", "surrogatepass")) > MAX_IDENTIFIER_BYTES:
        msg = (
            f"the schema name is {len(schema.encode('utf-8', 'surrogatepass'))} bytes; "
            f"PostgreSQL keeps only {MAX_IDENTIFIER_BYTES}, so it could name another store"
        )
        raise InvalidInput(msg)
    if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
        msg = (
            f"schema {schema!r} is not a plain PostgreSQL name: use lowercase letters, digits,"
            " _ and $, starting with a letter or _ (not pg_)"
        )
        raise InvalidInput(msg)


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
        """Parse a ``postgresql://`` URL; raises :class:`InvalidInput` naming what is wrong.

        No message holds a secret, nor any piece of the URL a parser might have cut out of
        one: the URL is shown as :func:`redact` makes it.
        """
        shown = redact(url)
        if not is_postgres_url(url):
            msg = f"not a PostgreSQL URL: {shown}"
            raise InvalidInput(msg)
        rest = url.split("://", 1)[1]
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "@" in rest[len(authority) :]:
            msg = (
                "the URL has an '@' after its host: percent-encode '@', '/', '?', '#' and ':'"
                f" in the user name and password (%40, %2F, %3F, %23, %3A): {shown}"
            )
            raise InvalidInput(msg)
        try:
            parts = urlsplit(url)
            port = parts.port or 5432
            username, password, hostname = parts.username, parts.password, parts.hostname
        except ValueError:
            msg = f"the URL's host or port cannot be read (encode special characters): {shown}"
            raise InvalidInput(msg) from None
        if parts.fragment or url.endswith("#"):
            msg = f"the URL has a '#' fragment (percent-encode '#' as %23): {shown}"
            raise InvalidInput(msg)
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname:
            msg = f"the URL names no database (postgresql://USER@HOST:PORT/DBNAME): {shown}"
            raise InvalidInput(msg)
        if len(dbname.encode("utf-8", "surrogatepass")) > MAX_IDENTIFIER_BYTES:
            msg = f"the database name is over {MAX_IDENTIFIER_BYTES} bytes: {shown}"
            raise InvalidInput(msg)
        given = cls._options(parts.query, shown)
        schema = str(given.pop("schema", "public"))
        check_schema_name(schema)
        password = str(given.pop("password", unquote(password or "")))
        ints = {key: value for key, value in given.items() if isinstance(value, int)}
        return cls(
            dbname=dbname,
            host=hostname or "localhost",
            port=port,
            user=unquote(username) if username else getpass.getuser(),
            password=password,
            schema=schema,
            **ints,
        )

    @staticmethod
    def _options(query: str, shown: str) -> dict[str, str | int]:
        """The URL's options, each checked; an option's value is shown only if it is not
        the password."""
        options: dict[str, str | int] = {}
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key not in _OPTIONS:
                name = key if _OPTION_NAME.fullmatch(key) else "(unreadable)"
                msg = f"bad URL option {name} (options: {', '.join(_OPTIONS)}): {shown}"
                raise InvalidInput(msg)
            if key in options:
                msg = f"the URL gives option {key} twice: {shown}"
                raise InvalidInput(msg)
            if key in _INT_OPTIONS:
                low, high = _INT_OPTIONS[key]
                if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
                    msg = (
                        f"URL option {key} must be a whole number from {low} to {high},"
                        f" not {value[:20]!r}: {shown}"
                    )
                    raise InvalidInput(msg)
                options[key] = int(value)
            elif key == "schema" and not value:
                msg = f"URL option schema is empty: {shown}"
                raise InvalidInput(msg)
            else:
                options[key] = value
        return options

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
            # Keeps each conversation's chained head (see convstore.ports.chain).
            "APPLICATION_RECORDER_TOPIC": (
                "convstore.infrastructure.postgres.recorder:ChainedPostgresRecorder"
            ),
        }

    @contextmanager
    def setup_lock(self, *, create: bool = True, shown: str = "") -> Iterator[StoreMarker]:
        """Hold the store's setup lock, with its schema created and claimed, for the duration;
        yield the store's marker (see :meth:`_claim`). With ``create=False`` a schema that
        holds no store (missing, or without convstore's tables) raises :class:`NoStore` naming
        ``shown`` and is left as it was: reading never creates a store.

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
            if not create and not self._holds_store(conn):
                msg = (
                    f"no store at {shown} (schema {self.schema} holds none: "
                    "nothing has been recorded there yet)"
                )
                raise NoStore(msg)
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
            )
            store_format = self._claim(conn)
            yield StoreMarker(store_format, self._identity(conn))

    def _holds_store(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the schema has convstore's marker or events table (a store made before
        the marker has only the events)."""
        regclass = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))"
        for name in (MARKER_TABLE, EVENTS_TABLE):
            row = conn.execute(regclass, (self.schema, name)).fetchone()
            if row is not None and row[0] is not None:
                return True
        return False

    def _identity(self, conn: psycopg.Connection[Any]) -> str:
        """The store's identity, given to it now if it has none (under the setup lock; read
        first, so opening a store that has one writes nothing)."""
        from psycopg import sql  # noqa: PLC0415

        table = sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(MARKER_TABLE))
        select = sql.SQL("SELECT value FROM {} WHERE key = %s").format(table)
        row = conn.execute(select, (IDENTITY_KEY,)).fetchone()
        if row is None:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING"
                ).format(table),
                (IDENTITY_KEY, new_identity()),
            )
            row = conn.execute(select, (IDENTITY_KEY,)).fetchone()
        assert row is not None
        return str(row[0])

    def _claim(self, conn: psycopg.Connection[Any]) -> int:
        """Mark the schema as holding a convstore store, or refuse it; return its format.

        A schema is refused only when its ``convstore_events`` table holds an event that is
        not convstore's, or its marker names another format: convstore owns just its two
        tables (``convstore_events``, ``convstore_store``), so other tables may share the
        schema (``public`` usually has some).

        A PostgreSQL store of format 1 (or made before the marker) becomes format 2 here, its
        events left as they are (a store of format 2 stays format 2, shared with 0.3.x, until
        it is upgraded): this version's writers no longer take the table lock that
        format-1 readers (convstore 0.2.0) rely on to never pass an event committed late, so
        such a reader must refuse the store (it does, in one line) rather than share it. A
        SQLite store keeps its format: its writers still take turns through the file's lock.
        """
        from psycopg import sql  # noqa: PLC0415

        def table(name: str) -> sql.Composed:
            return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

        regclass = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))"
        marked = conn.execute(regclass, (self.schema, MARKER_TABLE)).fetchone()
        if marked is not None and marked[0] is not None:
            row = conn.execute(
                sql.SQL("SELECT value FROM {} WHERE key = 'format'").format(table(MARKER_TABLE))
            ).fetchone()
            store_format = None if row is None else known_format(row[0])
            if store_format is None:
                found = "no format" if row is None else f"format {str(row[0])[:20]!r}"
                msg = f"schema {self.schema} holds a convstore store of {found}; {READS}"
                raise InvalidInput(msg)
            if store_format == FULL_JSON_FORMAT:
                conn.execute(
                    sql.SQL("UPDATE {} SET value = %s WHERE key = 'format'").format(
                        table(MARKER_TABLE)
                    ),
                    (str(COMPACT_FORMAT),),
                )
                return COMPACT_FORMAT
            return store_format
        events = conn.execute(regclass, (self.schema, EVENTS_TABLE)).fetchone()
        if events is not None and events[0] is not None:
            foreign = conn.execute(
                sql.SQL("SELECT topic FROM {} WHERE left(topic, %s) <> %s LIMIT 1").format(
                    table(EVENTS_TABLE)
                ),
                (len(TOPIC_PREFIX), TOPIC_PREFIX),
            ).fetchone()
            if foreign is not None:
                msg = (
                    f"schema {self.schema} holds another application's {EVENTS_TABLE} (topic"
                    f" {str(foreign[0])[:60]!r}); give the store a schema of its own"
                )
                raise InvalidInput(msg)
        # An earlier version's unmarked log becomes format 2 (its messages stay as they
        # are); a new schema gets this version's format.
        given = COMPACT_FORMAT if events is not None and events[0] is not None else STORE_FORMAT
        with conn.transaction():
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value text NOT NULL)"
                ).format(table(MARKER_TABLE))
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (key, value) VALUES ('format', %s) ON CONFLICT DO NOTHING"
                ).format(table(MARKER_TABLE)),
                (str(given),),
            )
            row = conn.execute(
                sql.SQL("SELECT value FROM {} WHERE key = 'format'").format(table(MARKER_TABLE))
            ).fetchone()
        claimed = None if row is None else known_format(row[0])
        assert claimed is not None  # this call or a concurrent one wrote a format this reads
        return claimed
