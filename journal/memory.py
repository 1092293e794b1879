"""In-memory journal: the reference backend for tests and benchmarks.

It stores the same encoded bytes as the durable backends (so the codec and the
digest chain are exercised), but nothing survives the process.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import trio

from .codec import GENESIS, chain, checkpoint_records, decode_event, encode_checked
from .errors import (
    ConflictError,
    DuplicateEventError,
    FencedError,
    JournalClosedError,
    JournalCorruptError,
    SessionNotFoundError,
)
from .events import SessionCheckpoint
from .record import Draft, Record, check_drafts, check_text
from .store import SessionInfo, SessionLease

__all__ = ["MemoryJournal"]


class _Row:
    __slots__ = ("at", "body", "cause", "digest", "id", "loop")

    def __init__(
        self, id: str, loop: str, at: int, cause: str | None, digest: bytes, body: bytes
    ) -> None:
        self.id, self.loop, self.at, self.cause, self.digest, self.body = (
            id,
            loop,
            at,
            cause,
            digest,
            body,
        )


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
        self.rows: list[_Row] = []
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
        if lease.incarnation != s.incarnation:
            raise FencedError(lease.session, lease.incarnation, s.incarnation)
        ids = [d.id for d in drafts]
        if len(set(ids)) != len(ids):
            # Two records with one id would make later idempotency checks ambiguous.
            raise DuplicateEventError(lease.session, next(i for i in ids if ids.count(i) > 1))
        bodies = [encode_checked(d.event) for d in drafts]
        stored = self._already_stored(lease.session, s, drafts, bodies)
        if stored is not None:
            return stored
        if expected_seq != len(s.rows):
            raise ConflictError(lease.session, expected_seq, len(s.rows))
        now = time.time_ns()
        previous = s.rows[-1].digest if s.rows else GENESIS
        records = []
        for d, body in zip(drafts, bodies, strict=True):
            previous = chain(previous, body)
            s.rows.append(_Row(d.id, d.loop, now, d.cause, previous, body))
            s.by_id[d.id] = len(s.rows)
            if isinstance(d.event, SessionCheckpoint):
                s.checkpoints.append(len(s.rows))
            records.append(
                Record(
                    seq=len(s.rows),
                    id=d.id,
                    session=lease.session,
                    loop=d.loop,
                    at=now,
                    cause=d.cause,
                    digest=previous,
                    event=d.event,
                )
            )
        s.updated_at = now
        s.changed.set()
        s.changed = trio.Event()
        return records

    def _already_stored(
        self, session: str, s: _Session, drafts: Sequence[Draft], bodies: list[bytes]
    ) -> list[Record] | None:
        seqs = [s.by_id.get(d.id) for d in drafts]
        if all(q is None for q in seqs):
            return None
        for d, body, q in zip(drafts, bodies, seqs, strict=True):
            if q is None:
                raise DuplicateEventError(session, d.id)
            row = s.rows[q - 1]
            if row.body != body or row.loop != d.loop:
                raise DuplicateEventError(session, d.id)
        return [self._record(session, q, s.rows[q - 1]) for q in seqs if q is not None]

    # -- reading --------------------------------------------------------------

    def _record(self, session: str, seq: int, row: _Row) -> Record:
        return Record(
            seq=seq,
            id=row.id,
            session=session,
            loop=row.loop,
            at=row.at,
            cause=row.cause,
            digest=row.digest,
            event=decode_event(row.body, session=session, seq=seq),
        )

    async def read(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        self._check_open()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        async for record in self._read_from(session, s, after):
            yield record

    async def _read_from(self, session: str, s: _Session, after: int) -> AsyncIterator[Record]:
        previous = s.rows[after - 1].digest if after > 0 and after <= len(s.rows) else GENESIS
        seq = after
        while seq < len(s.rows):
            row = s.rows[seq]
            seq += 1
            if chain(previous, row.body) != row.digest:
                raise JournalCorruptError(session, seq, "digest chain broken")
            previous = row.digest
            yield self._record(session, seq, row)
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
            r = rows[seq - 1]
            previous = rows[seq - 2].digest if seq > 1 else None
            stored.append((seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, previous))
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

    def corrupt_for_tests(self, session: str, seq: int, body: bytes) -> None:
        """Overwrite one stored event's bytes (used by the conformance suite)."""
        self._sessions[session].rows[seq - 1].body = body

    async def aclose(self) -> None:
        self._closed = True
        for s in self._sessions.values():
            s.changed.set()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")
