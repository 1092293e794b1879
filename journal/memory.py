"""In-memory journal: the reference backend for tests and benchmarks.

It stores the same encoded bytes and rows as the durable backends (so the
codec, the digest chain and ``journal.rules`` are exercised), but nothing
survives the process.  Every append is decided in full by
``rules.decide_append``: this is the plainest reading of the contract.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import trio

from .codec import GENESIS, chain, checkpoint_records, decode_event, encode_checked
from .errors import (
    DuplicateEventError,
    JournalClosedError,
    JournalCorruptError,
    SessionNotFoundError,
)
from .record import Draft, Record, check_drafts, check_text
from .rules import Mark, Row, check_lease, decide_append, repeated_id
from .store import SessionInfo, SessionLease, StorageCheck

__all__ = ["MemoryJournal"]


class _Session:
    __slots__ = (
        "by_id",
        "changed",
        "checkpoints",
        "created_at",
        "incarnation",
        "rows",
        "updated_at",
    )

    def __init__(self, now: int) -> None:
        self.rows: list[Row] = []
        """Record ``seq`` is ``rows[seq - 1]``."""
        self.by_id: dict[str, int] = {}
        self.checkpoints: list[int] = []
        """seqs of the session's ``session.checkpoint`` records."""
        self.incarnation = 0
        self.created_at = self.updated_at = now
        self.changed = trio.Event()


class MemoryJournal:
    """Journal kept in process memory (``memory:``)."""

    def __init__(self, url: str = "memory:") -> None:
        self.url = url
        self._sessions: dict[str, _Session] = {}
        self._closed = False

    # -- writing --------------------------------------------------------------

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        self._check_open()
        check_text("session id", session)
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            if not create:
                raise SessionNotFoundError(session)
            s = self._sessions[session] = _Session(time.time_ns())
        s.incarnation += 1
        return SessionLease(session=session, incarnation=s.incarnation, head=len(s.rows))

    async def append(
        self, lease: SessionLease, drafts: Sequence[Draft], *, expected_seq: int
    ) -> list[Record]:
        self._check_open()
        check_text("session id", lease.session)
        check_drafts(drafts)
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(lease.session)
        if s is None:
            raise SessionNotFoundError(lease.session)
        check_lease(lease.session, lease.incarnation, s.incarnation)
        # Two records with one id would make later idempotency checks ambiguous.
        repeated = repeated_id([d.id for d in drafts])
        if repeated is not None:
            raise DuplicateEventError(lease.session, repeated)
        pending = [(d.id, d.loop, d.cause, d.event, encode_checked(d.event)) for d in drafts]
        rows, by_id = s.rows, s.by_id
        hits = [rows[by_id[p[0]] - 1] if p[0] in by_id else None for p in pending]
        head = len(rows)
        digest = rows[-1][6] if rows else GENESIS
        new: list[Row] = []
        marks: list[Mark] = []
        now = time.time_ns()
        records, fresh = decide_append(
            lease.session, expected_seq, head, digest, pending, hits, now, new, marks
        )
        if not fresh:
            return records
        for row in new:
            rows.append(row)
            by_id[row[2]] = row[1]
        s.checkpoints.extend(seq for _, seq in marks)
        s.updated_at = now
        s.changed.set()
        s.changed = trio.Event()
        return records

    # -- reading --------------------------------------------------------------

    def _record(self, row: Row) -> Record:
        session, seq, id, loop, at, cause, digest, body = row
        return Record(
            seq=seq,
            id=id,
            session=session,
            loop=loop,
            at=at,
            cause=cause,
            digest=digest,
            event=decode_event(body, session=session, seq=seq),
        )

    async def read(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        self._check_open()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        async for record in self._read_from(session, s, after):
            yield record

    async def _read_from(self, session: str, s: _Session, after: int) -> AsyncIterator[Record]:
        previous = s.rows[after - 1][6] if after > 0 and after <= len(s.rows) else GENESIS
        seq = after
        while seq < len(s.rows):
            row = s.rows[seq]
            seq += 1
            # The row's own columns, every one: an edited one breaks the chain.
            stored_session, stored_seq, id, loop, at, cause, digest, body = row
            if chain(previous, stored_seq, id, stored_session, loop, at, cause, body) != digest:
                raise JournalCorruptError(session, seq, "digest chain broken")
            previous = digest
            yield self._record(row)
            if seq % 512 == 0:
                await trio.lowlevel.checkpoint()

    async def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        self._check_open()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        seq = after
        while True:
            changed = s.changed
            async for record in self._read_from(session, s, seq):
                seq = record.seq
                yield record
            if self._closed:
                return
            await changed.wait()

    async def head(self, session: str) -> int:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        return len(s.rows)

    async def checkpoints(self, session: str) -> list[Record]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        rows = s.rows
        stored = []
        for seq in s.checkpoints:
            _, _, id, loop, at, cause, digest, body = rows[seq - 1]
            previous = rows[seq - 2][6] if seq > 1 else None
            stored.append((seq, id, loop, at, cause, digest, body, previous))
        return checkpoint_records(session, stored)

    async def sessions(self) -> list[SessionInfo]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        return [
            SessionInfo(
                session=name,
                head=len(s.rows),
                incarnation=s.incarnation,
                created_at=s.created_at,
                updated_at=s.updated_at,
            )
            for name, s in self._sessions.items()
        ]

    async def check_storage(self) -> StorageCheck:
        """Nothing below the rows to check: process memory has no pages to damage."""
        self._check_open()
        await trio.lowlevel.checkpoint()
        return StorageCheck(checked=(), skipped=("memory: no storage below the records",))

    async def aclose(self) -> None:
        self._closed = True
        for s in self._sessions.values():
            s.changed.set()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")
