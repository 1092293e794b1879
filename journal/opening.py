"""Opening, creating and checking a journal named by a URL or a path.

Rules (the URL forms themselves are ``journal.location``):

* ``open_journal`` opens any location and creates what is missing: a SQLite
  file (mode 0600) and its schema, or the PostgreSQL tables.
* ``init_journal`` is ``loopruntime journal init``: make the journal exist,
  check its schema version, keep nothing open.  A SQLite file named by a
  plain path gets its directory created; a URL names exactly what to open.
* ``check_existing_journal`` refuses, without creating or writing anything,
  a SQLite file that is missing or is not a journal; it is what a reader
  that must never write (replay) calls before opening.

The PostgreSQL backend is imported only when a PostgreSQL URL is opened:
psycopg is an optional dependency.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from .blobs import choose_threshold
from .errors import JournalUnavailableError
from .location import JournalLocation, parse_location
from .memory import MemoryJournal
from .sqlite import SQLiteJournal
from .sqlite.schema import check_existing_file
from .store import Journal

__all__ = [
    "check_existing_journal",
    "init_journal",
    "make_journal_directory",
    "open_journal",
]


async def _open(location: JournalLocation, readonly: bool, blob_threshold: int) -> Journal:
    if location.scheme == "memory":
        return MemoryJournal(location.url, blob_threshold=blob_threshold)
    if location.scheme == "sqlite":
        return await SQLiteJournal.open(
            location.url, readonly=readonly, blob_threshold=blob_threshold
        )
    from .postgres import PostgresJournal  # psycopg is optional

    return await PostgresJournal.open(location.url, blob_threshold=blob_threshold)


@asynccontextmanager
async def open_journal(
    url: str, *, readonly: bool = False, blob_threshold: int | None = None
) -> AsyncIterator[Journal]:
    """Open the journal at ``url`` (or a plain path: a SQLite file) and close it on exit.

    ``readonly``: a SQLite journal is opened without creating or writing
    anything (a reader such as replay; a file on a read-only file system works),
    and refuses writes with ``JournalReadOnlyError``; the other backends open as
    usual.  ``blob_threshold``: the bytes above which a content block, a
    tool's input or a tool's result is stored once by digest beside the
    records (``journal.blobs``); None takes the URL's ``blob_threshold``
    option, else ``DEFAULT_BLOB_THRESHOLD``.  ``ValueError`` for a malformed
    URL (see ``journal.location``), a threshold that is not a positive number
    of bytes, or one passed here that differs from the URL's.
    """
    location = parse_location(url)
    threshold = choose_threshold(blob_threshold, location.blob_threshold, url)
    journal = await _open(location, readonly, threshold)
    try:
        yield journal
    finally:
        await journal.aclose()


def make_journal_directory(location: JournalLocation) -> None:
    """Create the missing directories of a SQLite file (named by a path or a
    URL alike); nothing for another scheme.  ``JournalUnavailableError``
    naming the journal when they cannot be made."""
    if location.scheme != "sqlite":
        return
    assert location.path is not None
    parent = Path(location.path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JournalUnavailableError(
            f"cannot create the journal {location.path}: its directory {parent} cannot be "
            f"made ({exc.strerror or exc})"
        ) from exc


async def init_journal(url: str) -> JournalLocation:
    """Make the journal at ``url`` exist and check its version; return its location.

    Idempotent.  A SQLite file gets its missing directories; a
    PostgreSQL database gets the tables (``postgres.init_schema``); a memory
    journal needs nothing.  ``JournalSchemaError`` for a newer schema,
    ``NotAJournalError`` for a file or database that is not a journal,
    ``JournalUnavailableError`` for a server that cannot be reached.
    """
    location = parse_location(url)
    if location.scheme == "postgresql":
        from .postgres import init_schema  # psycopg is optional

        assert location.conninfo is not None
        await init_schema(location.conninfo)
    elif location.scheme == "sqlite":
        make_journal_directory(location)
        journal = await SQLiteJournal.open(location.url)
        await journal.aclose()
    return location


async def check_existing_journal(url: str) -> JournalLocation:
    """The location of ``url``, once a SQLite file there is known to be a journal.

    Creates and writes nothing.  ``NotAJournalError`` (saying which) for a
    SQLite file that is missing, empty, not a database or not a journal.
    Other schemes are not looked at: a server database or a memory journal
    has no file that opening could conjure up by mistake.
    """
    location = parse_location(url)
    if location.scheme == "sqlite":
        assert location.path is not None
        await trio.to_thread.run_sync(check_existing_file, location.path)
    return location
