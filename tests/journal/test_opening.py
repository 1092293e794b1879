"""Journal URLs and paths: parsing, init, and refusing what is not a journal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from journal import (
    JournalLocation,
    JournalUnavailableError,
    NotAJournalError,
    check_existing_journal,
    init_journal,
    make_journal_directory,
    open_journal,
    parse_location,
)
from journal.memory import MemoryJournal
from journal.sqlite import SQLiteJournal


def test_every_form_of_location() -> None:
    assert parse_location("memory:") == JournalLocation(scheme="memory", url="memory:")
    assert parse_location("memory:anything").scheme == "memory"
    assert parse_location("sqlite:///j.db?synchronous=full&poll=0.5") == JournalLocation(
        scheme="sqlite",
        url="sqlite:///j.db?synchronous=full&poll=0.5",
        path="j.db",
        synchronous="FULL",
        poll=0.5,
    )
    assert parse_location("sqlite:////abs/j.db").path == "/abs/j.db"
    assert parse_location("./dir//j.db") == JournalLocation(
        scheme="sqlite", url="sqlite:///dir/j.db", path="dir/j.db", plain_path=True
    )
    for url in ("postgresql://u@h/db", "postgres://u@h/db"):
        assert parse_location(url) == JournalLocation(scheme="postgresql", url=url, conninfo=url)


def test_a_url_carries_the_blob_threshold_in_bytes_or_with_a_unit() -> None:
    sizes = {"4096": 4096, "512KiB": 512 * 1024, "1MiB": 1 << 20, "2mb": 2_000_000, "1GiB": 1 << 30}
    for text, size in sizes.items():
        assert parse_location(f"sqlite:///j.db?blob_threshold={text}").blob_threshold == size
    assert parse_location("memory:?blob_threshold=1KiB").blob_threshold == 1024
    assert parse_location("sqlite:///j.db").blob_threshold is None
    # libpq gets the URL without the option and with the rest of its query as written.
    url = "postgresql://u@h/db?sslmode=require&blob_threshold=1MiB&options=-csearch_path%3Dx"
    location = parse_location(url)
    assert location.blob_threshold == 1 << 20 and location.url == url
    assert location.conninfo == "postgresql://u@h/db?sslmode=require&options=-csearch_path%3Dx"
    assert parse_location("postgres://u@h/db?blob_threshold=1").conninfo == "postgres://u@h/db"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://h/db", "unknown journal URL"),
        ("sqlite://host/j.db", "names a host"),
        ("sqlite:///", "does not name a database file"),
        ("sqlite:///:memory:", "does not name a database file"),
        ("sqlite:///j.db?synchronous=OFF", "synchronous must be NORMAL or FULL"),
        ("sqlite:///j.db?poll=0", "poll must be a positive number"),
        ("sqlite:///j.db?poll=soon", "poll must be a positive number"),
        ("sqlite:///j.db?cache=1", "unknown option 'cache'"),
        ("sqlite:///j.db?blob_threshold=0", "blob_threshold must be a positive number of bytes"),
        ("sqlite:///j.db?blob_threshold=big", "blob_threshold must be a positive number"),
        ("sqlite:///j.db?blob_threshold=1.5MiB", "blob_threshold must be a positive number"),
        ("sqlite:///j.db?blob_threshold=1TB", "blob_threshold must be a positive number"),
        ("memory:?blob_threshold=", "blob_threshold must be a positive number"),
        ("memory:?cache=1", "unknown option 'cache'"),
        ("postgresql://u@h/db?blob_threshold=-1", "blob_threshold must be a positive number"),
    ],
)
async def test_malformed_locations_are_refused_before_anything_is_opened(
    url: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        parse_location(url)
    with pytest.raises(ValueError, match=says):
        async with open_journal(url):
            pass


async def test_open_journal_takes_a_plain_path(tmp_path: Path) -> None:
    async with open_journal(str(tmp_path / "j.db")) as journal:
        assert isinstance(journal, SQLiteJournal)
        assert journal.url == f"sqlite:///{tmp_path / 'j.db'}"
    async with open_journal("memory:") as journal:
        assert isinstance(journal, MemoryJournal)


async def test_init_makes_the_directory_of_a_path_but_not_of_a_url(tmp_path: Path) -> None:
    path = tmp_path / "new" / "j.db"
    location = await init_journal(str(path))
    assert location.url == f"sqlite:///{path}" and path.is_file()
    assert await init_journal(str(path)) == location  # idempotent
    async with open_journal(location.url) as journal:
        assert await journal.sessions() == []

    # A URL gets its missing directories as a plain path does.
    elsewhere = tmp_path / "missing" / "j.db"
    assert (await init_journal(f"sqlite:///{elsewhere}")).path == str(elsewhere)
    assert elsewhere.is_file()

    # Directories that cannot be made: a named error, nothing half made.
    (tmp_path / "plain.txt").write_text("hello")
    under_a_file = parse_location(str(tmp_path / "plain.txt" / "j.db"))
    with pytest.raises(JournalUnavailableError, match="cannot create the journal"):
        make_journal_directory(under_a_file)

    assert (await init_journal("memory:")).scheme == "memory"


async def test_init_creates_the_postgres_tables(postgres_url: str) -> None:
    location = await init_journal(postgres_url)
    assert location.scheme == "postgresql"
    async with open_journal(postgres_url) as journal:
        assert await journal.sessions() == []


async def test_only_an_existing_journal_file_passes_the_check(tmp_path: Path) -> None:
    journal_path = tmp_path / "j.db"
    await init_journal(str(journal_path))
    assert (await check_existing_journal(str(journal_path))).path == str(journal_path)
    assert (await check_existing_journal("memory:")).scheme == "memory"

    missing = tmp_path / "nowhere" / "j.db"
    with pytest.raises(NotAJournalError, match="does not exist"):
        await check_existing_journal(str(missing))
    assert not missing.parent.exists()
    with pytest.raises(NotAJournalError, match="not a journal file"):
        await check_existing_journal(str(tmp_path))
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(NotAJournalError, match="empty"):
        await check_existing_journal(f"sqlite:///{empty}")
    assert empty.stat().st_size == 0
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    with pytest.raises(NotAJournalError, match="not a loopruntime journal"):
        await check_existing_journal(str(text))
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(NotAJournalError, match="not a loopruntime journal"):
        await check_existing_journal(str(other))
