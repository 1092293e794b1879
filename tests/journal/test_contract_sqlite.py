"""The conformance suite against the SQLite backend (one file per test)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from journal import Journal, open_journal
from journal.sqlite import SQLiteJournal
from tests.support.damage import damage_entry, damage_record, edit_record, expire_lease

from .contract import JournalContract


class SQLiteBackend:
    """Every ``open()`` opens the same file."""

    persistent = True
    wakeups = False

    def __init__(self, path: Path, synchronous: str) -> None:
        self.url = f"sqlite:///{path}?synchronous={synchronous}"

    def open(self) -> AbstractAsyncContextManager[Journal]:
        return open_journal(self.url)

    async def corrupt(self, journal: Journal, session: str, seq: int, body: bytes) -> None:
        assert isinstance(journal, SQLiteJournal)
        damage_record(journal, session, seq, body)

    async def edit(
        self, journal: Journal, session: str, seq: int, column: str, value: object
    ) -> None:
        assert isinstance(journal, SQLiteJournal)
        edit_record(journal, session, seq, column, value)

    async def expire(self, journal: Journal, session: str) -> None:
        expire_lease(journal, session)

    async def damage_entry(self, journal: Journal, session: str, number: int, body: bytes) -> None:
        damage_entry(journal, session, number, body)


class TestSQLite(JournalContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "journal.db", "NORMAL")


class TestSQLiteFull(JournalContract):
    """The same contract with ``synchronous=FULL`` (an fsync per group commit)."""

    @pytest.fixture
    def backend(self, tmp_path: Path) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "journal.db", "FULL")
