"""The conformance suite against the PostgreSQL backend, on a real server.

Each test gets a schema of its own (``postgres_url``); every ``open()`` of a
test opens that same schema, so the journal persists between them.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
import trio

from journal import Journal, open_journal
from journal.postgres import PostgresJournal
from tests.support.damage import (
    damage_postgres_entry,
    damage_postgres_record,
    edit_postgres_record,
    expire_postgres_lease,
)

from .contract import JournalContract


class PostgresBackend:
    """Every ``open()`` opens the same schema of the test server."""

    persistent = True

    def __init__(self, url: str) -> None:
        self.url = url

    def open(self) -> AbstractAsyncContextManager[Journal]:
        return open_journal(self.url)

    async def corrupt(self, journal: Journal, session: str, seq: int, body: bytes) -> None:
        # Straight to the table, as damage would be: the backend has no hook for it.
        assert isinstance(journal, PostgresJournal)
        await trio.to_thread.run_sync(damage_postgres_record, self.url, session, seq, body)

    async def edit(
        self, journal: Journal, session: str, seq: int, column: str, value: object
    ) -> None:
        assert isinstance(journal, PostgresJournal)
        await trio.to_thread.run_sync(edit_postgres_record, self.url, session, seq, column, value)

    async def expire(self, journal: Journal, session: str) -> None:
        await trio.to_thread.run_sync(expire_postgres_lease, self.url, session)

    async def damage_entry(self, journal: Journal, session: str, number: int, body: bytes) -> None:
        await trio.to_thread.run_sync(damage_postgres_entry, self.url, session, number, body)


class TestPostgres(JournalContract):
    @pytest.fixture
    def backend(self, postgres_url: str) -> PostgresBackend:
        return PostgresBackend(postgres_url)
