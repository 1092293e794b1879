"""The conformance suite against the in-memory backend."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from journal import Journal, open_journal
from journal.memory import MemoryJournal
from tests.support.damage import damage_entry, damage_record, edit_record, expire_lease

from .contract import JournalContract


class MemoryBackend:
    """``open()`` gives a new, empty journal each time: nothing persists."""

    persistent = False

    def open(self) -> AbstractAsyncContextManager[Journal]:
        return open_journal("memory:")

    async def corrupt(self, journal: Journal, session: str, seq: int, body: bytes) -> None:
        assert isinstance(journal, MemoryJournal)
        damage_record(journal, session, seq, body)

    async def edit(
        self, journal: Journal, session: str, seq: int, column: str, value: object
    ) -> None:
        assert isinstance(journal, MemoryJournal)
        edit_record(journal, session, seq, column, value)

    async def expire(self, journal: Journal, session: str) -> None:
        expire_lease(journal, session)

    async def damage_entry(self, journal: Journal, session: str, number: int, body: bytes) -> None:
        damage_entry(journal, session, number, body)


class TestMemory(JournalContract):
    @pytest.fixture
    def backend(self) -> MemoryBackend:
        return MemoryBackend()
