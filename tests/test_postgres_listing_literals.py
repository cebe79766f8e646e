"""The PostgreSQL recorder writes the listing's statements as literals itself: text that needs
quoting must arrive exactly as given."""

from __future__ import annotations

from convstore import open_store


def test_listing_rows_keep_quotes_backslashes_and_percents(postgres_url: str) -> None:
    """Titles and labels holding quotes, backslashes, ``%s`` and non-ASCII text are listed
    exactly, and equal the index rebuilt from the events."""
    import psycopg  # noqa: PLC0415 - the PostgreSQL extra, present wherever this test runs

    title = "O'Brien's \\x00 %s %% '' \\' ünï ☃"
    labels = {"quote": "it's '' \\ %s", "k": "\\x41'"}
    with open_store(postgres_url) as store:
        conv = store.new_conversation(title=title)
        store.set_labels(conv, labels)
        store.append_message(conv, "user", [{"type": "text", "text": "hi"}])
        store.rename(conv, title + "!")
        before = store.conversations()
        assert [c.title for c in before] == [title + "!"]
        assert [c.id for c in store.list_conversations(labels=labels).conversations] == [conv]
    server, _, schema = postgres_url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".convstore_listing, "{schema}".convstore_labels')
    with open_store(postgres_url) as store:
        assert store.conversations() == before
        assert store.list_conversations(labels=labels).conversations == before
