"""Store URLs: recognised as libpq and SQLAlchemy users write them, never taken for a file,
never showing a secret, with every option and schema name checked before anything is made.

The tests that need no server use an unreachable port; the others run against the real
PostgreSQL server of ``tests/conftest.py`` and drop every schema they make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from click.testing import CliRunner

from convstore import InvalidInput, StoreError, open_store
from convstore.cli import cli
from convstore.infrastructure.postgres.factory import PostgresSettings, redact

SECRET = "s3cret-Pa55"  # noqa: S105 - a test password, shown nowhere
TEXT = {"type": "text", "text": "hello"}


@pytest.fixture(autouse=True)
def _in_an_empty_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test runs in an empty working directory (the environment is isolated by
    tests/conftest.py)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def _texts(error: BaseException | None) -> str:
    """The text of an exception and of every exception chained to it."""
    texts = []
    while error is not None:
        texts += [str(error), repr(error)]
        error = error.__cause__ or error.__context__
    return "\n".join(texts)


def _cli(location: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--db", location, *args])
    assert len(result.stderr.splitlines()) == 1, result.stderr
    return result.exit_code, result.output


# -- item 8: schemes and secrets ------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme", ["POSTGRESQL", "Postgres", "postgresql+psycopg", "postgresql+psycopg2", "postgres"]
)
def test_postgres_urls_in_any_spelling_are_urls_never_files(scheme: str) -> None:
    """Upper-case and SQLAlchemy-style PostgreSQL URLs reach the server (here: refused
    connection, exit 1), never create a local file, and never show the password."""
    url = f"{scheme}://app:{SECRET}@127.0.0.1:1/db?connect_timeout=2"
    with pytest.raises(StoreError) as caught:
        open_store(url)
    assert "cannot reach the store" in str(caught.value)
    assert SECRET not in _texts(caught.value)
    assert "app:***@127.0.0.1:1" in str(caught.value)
    code, output = _cli(url, "new")
    assert code == 1
    assert SECRET not in output
    assert list(Path.cwd().iterdir()) == []


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://app:{SECRET}@127.0.0.1/db",
        f"HTTP://app:{SECRET}@example.invalid/",
        "sqlite:///x.db",
        "file:///tmp/x.db",
        f"postgresqlx://app:{SECRET}@h/db",
    ],
)
def test_other_url_schemes_are_refused_never_files(url: str) -> None:
    """Any other scheme:// location is an unknown scheme (InvalidInput, exit 2), creates
    nothing, and its password is masked."""
    with pytest.raises(InvalidInput, match="unknown store URL scheme") as caught:
        open_store(url)
    assert SECRET not in _texts(caught.value)
    code, output = _cli(url, "new")
    assert code == 2
    assert SECRET not in output
    assert list(Path.cwd().iterdir()) == []


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app@127.0.0.1:1/db?password={SECRET}&connect_timeout=2",
        f"postgresql://app@127.0.0.1:1/db?password={SECRET}&bogus=1",
        f"postgresql://app@127.0.0.1:1/db?PASSWORD={SECRET}",
        f"postgresql://app@127.0.0.1:1/db?sslpassword={SECRET}",
        f"postgresql://app:{SECRET}@127.0.0.1:1/db?pool_size=0",
        f"postgresql://app:x{SECRET}?connect_timeout=1@127.0.0.1:1/db",
    ],
    ids=["password option", "with a bad option", "upper case", "sslpassword", "bad value", "?"],
)
def test_no_secret_from_any_part_of_a_url_is_shown(url: str) -> None:
    """A password in the query (password=, any case) is masked like one in the user part, in
    the exception chain and on the CLI's one line."""
    with pytest.raises((StoreError, InvalidInput)) as caught:
        open_store(url)
    assert SECRET not in _texts(caught.value)
    assert "***" in str(caught.value)
    _code, output = _cli(url, "list")
    assert SECRET not in output


@pytest.mark.parametrize("scheme", ["postgresql", "POSTGRES", "postgresql+psycopg"])
def test_a_url_folded_by_pathlib_is_refused_without_its_password(scheme: str) -> None:
    """Path("postgresql://…") reads "postgresql:/…": refused as a mangled URL (exit 2), never
    a file path whose error would show the password."""
    location = Path(f"{scheme}://app:{SECRET}@127.0.0.1:1/db")
    with pytest.raises(InvalidInput, match="without the '//'") as caught:
        open_store(location)
    assert SECRET not in _texts(caught.value)
    code, output = _cli(str(location), "new")
    assert code == 2
    assert SECRET not in output
    assert list(Path.cwd().iterdir()) == []


def test_a_password_option_is_used_and_masked() -> None:
    """libpq's password= option gives the password, and redact masks it."""
    settings = PostgresSettings.from_url(f"postgresql://app@h/db?password={SECRET}&schema=s")
    assert settings.password == SECRET
    assert redact(f"postgresql://app@h/db?password={SECRET}&schema=s") == (
        "postgresql://app@h/db?password=***&schema=s"
    )


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:{SECRET}@[::1/db",
        f"postgresql://app:{SECRET}@[::1]:x/db",
        f"postgresql://app:{SECRET}@h/db#frag",
    ],
    ids=["unclosed IPv6", "bad port", "fragment"],
)
def test_an_unreadable_url_is_bad_input(url: str) -> None:
    """A URL a parser cannot read is InvalidInput with one line (exit 2), not an unexpected
    ValueError (exit 1), and shows no secret."""
    with pytest.raises(InvalidInput) as caught:
        open_store(url)
    assert SECRET not in _texts(caught.value)
    code, output = _cli(url, "new")
    assert code == 2
    assert SECRET not in output


# -- item 12: option ranges -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "connect_timeout=0",
        "connect_timeout=3601",
        "lock_timeout=0",
        "lock_timeout=86401",
        "lock_timeout=2147484",
        "pool_size=0",
        "max_overflow=1001",
        "pool_size=-1",
        "schema=",
        "schema=a&schema=b",
    ],
)
def test_out_of_range_url_options_are_refused(query: str) -> None:
    """Options the driver would accept and then fail on (connect_timeout=0, a pool of none)
    or silently change are refused with one line naming the option."""
    with pytest.raises(InvalidInput) as caught:
        PostgresSettings.from_url(f"postgresql://app:{SECRET}@h/db?{query}")
    message = str(caught.value)
    assert query.split("=", 1)[0] in message
    assert "\n" not in message
    assert SECRET not in message


# -- item 7: schema names -------------------------------------------------------------------------


@pytest.fixture
def schemas(postgres_server: str) -> Iterator[Callable[[str], str]]:
    """Makes store URLs on the test server for given schema names; drops them all after."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    made: list[str] = []

    def url(schema: str) -> str:
        made.append(schema)
        return f"{postgres_server}?schema={schema}"

    yield url
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        for schema in made:
            for name in {schema, schema.lower(), schema[:63]}:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )


def _schema_exists(server: str, name: str) -> bool:
    import psycopg  # noqa: PLC0415

    with psycopg.connect(server) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone()
    return row is not None


def test_two_long_schema_names_are_never_one_store(
    postgres_server: str, schemas: Callable[[str], str]
) -> None:
    """<63 bytes>alice and <63 bytes>bob would both be truncated to <63 bytes>: both are
    refused before anything is made; a name of exactly 63 bytes works."""
    stem = "t" + uuid4().hex + "x" * 30  # 63 bytes
    assert len(stem) == 63
    for suffix in ("alice", "bob"):
        with pytest.raises(InvalidInput, match="63"):
            open_store(schemas(stem + suffix))
        assert not _schema_exists(postgres_server, stem)
    with open_store(schemas(stem)) as store:
        store.append_message(store.new_conversation(), "user", [TEXT])
    assert _schema_exists(postgres_server, stem)


@pytest.mark.parametrize(
    "name", ["Prod", "my.schema", "has space", "1abc", "pg_tenant", "ünï", 'x"y', "a-b"]
)
def test_schema_names_the_server_would_change_are_refused_first(
    postgres_server: str, schemas: Callable[[str], str], name: str
) -> None:
    """Mixed case, dots, spaces, a leading digit, pg_ and non-ASCII are refused (exit 2) and no
    schema of that name, or its lower-case fold, is left behind."""
    unique = f"{name}{uuid4().hex[:6]}"
    url = schemas(unique)
    with pytest.raises(InvalidInput, match="schema"):
        open_store(url)
    code, _output = _cli(url, "new")
    assert code == 2
    assert not _schema_exists(postgres_server, unique)
    assert not _schema_exists(postgres_server, unique.lower())


# -- item 14 on PostgreSQL: the schema is marked --------------------------------------------------


def _execute(server: str, statement: str) -> list[tuple[object, ...]]:
    import psycopg  # noqa: PLC0415

    with psycopg.connect(server, autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def test_a_schema_is_marked_and_an_unmarked_store_is_marked_on_open(
    postgres_server: str, schemas: Callable[[str], str]
) -> None:
    """A new schema gets the convstore_store marker (format 3); a store without it (made by an
    earlier version) opens with its conversations and is marked format 2: this version's
    lock-free writers must not share a PostgreSQL store with readers that expect the lock, and
    its messages stay in the form that version wrote."""
    schema = f"mark_{uuid4().hex[:12]}"
    url = schemas(schema)
    with open_store(url) as store:
        conv = store.new_conversation()
    marker = f"SELECT key, value FROM {schema}.convstore_store WHERE key = 'format'"  # noqa: S608
    assert _execute(postgres_server, marker) == [("format", "3")]
    _execute(postgres_server, f"DROP TABLE {schema}.convstore_store")
    with open_store(url) as store:
        assert [c.id for c in store.conversations()] == [conv]
    assert _execute(postgres_server, marker) == [("format", "2")]


def test_a_schema_holding_another_applications_events_is_refused_untouched(
    postgres_server: str, schemas: Callable[[str], str]
) -> None:
    """An unmarked convstore_events table holding another application's topic is refused
    (exit 2) and its rows are left as they were."""
    schema = f"other_{uuid4().hex[:12]}"
    url = schemas(schema)
    with open_store(url):
        pass
    _execute(postgres_server, f"DROP TABLE {schema}.convstore_store")
    _execute(
        postgres_server,
        f"INSERT INTO {schema}.convstore_events (originator_id, originator_version, topic, state)"  # noqa: S608
        " VALUES (gen_random_uuid(), 1, 'bank:Account.Opened', '\\x7b7d')",
    )
    count = f"SELECT count(*) FROM {schema}.convstore_events"  # noqa: S608
    with pytest.raises(InvalidInput, match="another application"):
        open_store(url)
    code, _output = _cli(url, "new")
    assert code == 2
    assert _execute(postgres_server, count) == [(1,)]
    assert not _execute(postgres_server, f"SELECT to_regclass('{schema}.convstore_store')")[0][0]


def test_an_upper_case_scheme_opens_a_real_store_with_its_password_masked(
    make_postgres_url: Callable[[], str],
) -> None:
    """POSTGRESQL://user:password@… opens the server's store; Store.location masks the
    password (the server trusts the connection, so the password is not checked)."""
    url = make_postgres_url().replace("postgresql://postgres@", f"POSTGRESQL://postgres:{SECRET}@")
    with open_store(url) as store:
        assert SECRET not in store.location
        assert store.location.startswith("POSTGRESQL://postgres:***@")
        store.append_message(store.new_conversation(), "user", [TEXT])
