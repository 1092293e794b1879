"""Blocking access to a journal's inbox and records, for code that is not trio's.

A client process needs five things of a journal: put a command into a
session's inbox, read an entry's outcome back, read a session's records after
a seq, list the sessions, and list the hosts (which definitions a live one
serves).  ``open_blocking(url)`` gives exactly those as
plain blocking calls, safe to make from any thread and from any event loop's
worker threads; nothing here starts or needs a trio run.  Each backend runs
the statements and decisions its trio journal runs (``sqlite/blocking.py``,
``postgres/blocking.py``); a memory journal lives inside one trio run, so it
has no blocking form.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .inbox import InboxCommand, InboxEntry
from .location import parse_location
from .record import Record
from .sqlite.blocking import SQLiteBlocking
from .store import HostInfo, SessionInfo

__all__ = ["BlockingJournal", "open_blocking"]


@runtime_checkable
class BlockingJournal(Protocol):
    """A journal's inbox and records through blocking, thread-safe calls.

    ``put``, ``entry``, ``sessions`` and ``hosts`` mean what the ``Journal`` methods of
    the same names mean; ``read`` returns (rather than yields) up to about
    ``limit`` records after seq ``after``, verified, and ``[]`` when there are
    none yet.  After ``close`` every call raises ``JournalClosedError``.
    """

    url: str

    def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry: ...

    def entry(self, session: str, key: str) -> InboxEntry | None: ...

    def read(self, session: str, *, after: int = 0, limit: int = 512) -> list[Record]: ...

    def sessions(self) -> list[SessionInfo]: ...

    def hosts(self) -> list[HostInfo]: ...

    def close(self) -> None: ...


def open_blocking(url: str) -> BlockingJournal:
    """The journal at ``url`` (created when missing, as ``open_journal`` does),
    for blocking calls; close it with ``close()``.

    ``ValueError`` for a malformed URL or a ``memory:`` journal (it lives in
    one process's trio run: a client needs ``sqlite:`` or ``postgresql:``);
    ``JournalUnavailableError``, ``NotAJournalError`` or ``JournalSchemaError``
    when it cannot be opened.
    """
    location = parse_location(url)
    if location.scheme == "memory":
        raise ValueError(
            f"{url!r} is a memory journal, which lives inside one process's trio run and "
            "cannot be reached from outside it; give a client a sqlite:/// or postgresql:// URL"
        )
    if location.scheme == "sqlite":
        return SQLiteBlocking(location)
    from .postgres.blocking import PostgresBlocking  # psycopg is optional

    assert location.conninfo is not None
    return PostgresBlocking(location.conninfo, location.max_entry_bytes)
