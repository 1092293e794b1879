"""The three backends, opened with a blob threshold, and a look at what each stores.

``Backend.open(threshold)`` opens the test's store (every call the same one:
a memory journal is kept between calls); ``stored_body`` and ``blobs`` read
the rows as stored, below the journal; ``damage_blob`` overwrites (or, with
None, deletes) one blob.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import trio

from journal import Journal, open_journal
from journal.memory import MemoryJournal
from tests.support.damage import damage_blob, damage_postgres_blob

__all__ = ["Backend"]


class Backend:
    def __init__(self, kind: str, url: str) -> None:
        self.kind, self.url = kind, url
        self._memory: MemoryJournal | None = None

    @asynccontextmanager
    async def open(self, threshold: int = 1024) -> AsyncIterator[Journal]:
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryJournal(blob_threshold=threshold)
            self._memory.blob_threshold = threshold
            yield self._memory
            return
        async with open_journal(self.url, blob_threshold=threshold) as journal:
            yield journal

    def _rows(self, query: str, params: tuple[object, ...] = ()) -> list[tuple[bytes, ...]]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            try:
                return [tuple(bytes(c) for c in row) for row in conn.execute(query, params)]
            finally:
                conn.close()
        with psycopg.connect(self.url) as conn:
            query = query.replace("?", "%s").replace("FROM ", "FROM loopruntime_")
            return [tuple(bytes(c) for c in row) for row in conn.execute(query, params)]

    async def blobs(self) -> dict[bytes, bytes]:
        """Every stored blob: digest -> bytes."""
        if self.kind == "memory":
            assert self._memory is not None
            return dict(self._memory._blobs)
        rows = await trio.to_thread.run_sync(self._rows, "SELECT digest, body FROM blobs")
        return {d: b for d, b in rows}

    async def stored_body(self, session: str, seq: int) -> bytes:
        """The bytes stored in the record's row."""
        if self.kind == "memory":
            assert self._memory is not None
            return self._memory._sessions[session].rows[seq - 1][7]
        rows = await trio.to_thread.run_sync(
            self._rows, "SELECT body FROM records WHERE session = ? AND seq = ?", (session, seq)
        )
        return rows[0][0]

    async def damage_blob(self, journal: Journal, digest: bytes, body: bytes | None) -> None:
        if self.kind == "postgres":
            await trio.to_thread.run_sync(damage_postgres_blob, self.url, digest, body)
        else:
            damage_blob(journal, digest, body)


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"
