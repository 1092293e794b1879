"""Reading a SQLite journal: reader connections in worker threads, and ``tail``.

Rules: the trio thread never waits on the disk.  Readers use a pool of
their own connections (never the writer's); a read fetches the next batch of
rows while this one's digest chain is verified and its events decoded on the
trio side.  A ``tail`` is woken at once by appends through the same journal
object (``Reading.wake``) and polls every ``poll`` seconds for appends by
other processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar

import msgspec
import outcome
import trio

from ..blobs import is_split, join, references
from ..codec import GENESIS, decode_event
from ..errors import JournalClosedError, JournalCorruptError, SessionNotFoundError
from ..events import Event
from ..inbox import Claim, InboxEntry, decode_entry, decode_outcome
from ..record import Record
from ..store import Checkpointed, HostInfo, SessionInfo, StorageCheck, StorageProblem
from .blobs import fetch as fetch_blobs
from .checkpoints import checkpointed, checkpoints
from .leases import list_hosts
from .schema import Access, connect, damaged, unavailable

__all__ = [
    "SELECT_BATCH",
    "SELECT_SESSION",
    "Readers",
    "Reading",
    "entry_of",
    "list_sessions",
    "query_session",
]

SELECT_BATCH = (
    "SELECT seq, id, loop, at, cause, digest, body FROM records"
    " WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?"
)
# Whether the session exists, and the first seq chained over the whole record
# (NULL: from seq 1).
SELECT_SESSION = (
    "SELECT (SELECT 1 FROM sessions WHERE session = ?),"
    " (SELECT whole_from FROM chain_rule WHERE session = ?)"
)

_T = TypeVar("_T")

_READ_BATCH = 4096
"""Rows per reader round trip: large enough that the thread hop is noise."""

_FIRST_BATCH = 512
"""Rows in a read's first round trip: small, so the first record comes soon."""


# The chain step of codec.chain, inlined in the hot loops: copying a fresh
# blake2b-128 state is cheaper than constructing one (which parses its keyword
# arguments every time), a quarter off each step.
_new_hash = hashlib.blake2b(digest_size=16).copy
_pack = msgspec.msgpack.Encoder().encode
# A decoder of our own so the read loop calls it directly; failures go through
# codec.decode_event, which names the seq and tells a schema error from damage.
_decoder = msgspec.msgpack.Decoder(Event)


class Readers:
    """A pool of reader connections, each lent to one worker thread at a time."""

    def __init__(
        self, path: str, synchronous: str, access: Access, stand_ins: tuple[str, ...]
    ) -> None:
        self._path, self._synchronous, self._access = path, synchronous, access
        self._stand_ins = stand_ins
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(self._path, self._synchronous, self._access)
            for statement in self._stand_ins:
                conn.execute(statement)
            conn.execute("PRAGMA query_only = ON")
        try:
            yield conn
        finally:
            with self._lock:
                if self.closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


_Batch = tuple[list[tuple[Any, ...]], int]
"""A batch of record rows and the session's first whole-record seq (read by
a read's first fetch; 0 from the later ones)."""


class _Fetch:
    """One batch of rows being fetched in a worker thread, awaitable from trio.

    Started with ``trio.lowlevel.start_thread_soon`` rather than
    ``trio.to_thread`` so that a reader can fetch the next batch while it
    decodes this one, without a nursery inside its async generator.  If the
    reader goes away first, the thread finishes, returns its connection to the
    pool and the rows are dropped.
    """

    __slots__ = ("_done", "_result", "limit")

    def __init__(
        self,
        work: Callable[[], _Batch],
        limit: int,
        token: trio.lowlevel.TrioToken,
    ) -> None:
        self.limit = limit
        self._done = trio.Event()
        self._result: outcome.Outcome[_Batch] | None = None

        def deliver(result: outcome.Outcome[_Batch]) -> None:
            self._result = result
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._done.set)

        trio.lowlevel.start_thread_soon(work, deliver, name="loopruntime-journal-reader")

    async def rows(self) -> _Batch:
        await self._done.wait()
        assert self._result is not None
        return self._result.unwrap()


class Reading:
    """Everything a ``SQLiteJournal`` reads with: the reader pool and the tails' wakeups.

    Lives on the trio thread; the blocking halves (``_fetch``, ``_head``,
    ``_checkpoints``, ``_sessions``) run in worker threads.
    """

    def __init__(
        self,
        url: str,
        path: str,
        synchronous: str,
        poll: float,
        token: trio.lowlevel.TrioToken,
        access: Access = "write",
        stand_ins: tuple[str, ...] = (),
    ) -> None:
        self.url, self.path, self.poll = url, path, poll
        self.closed = False
        """Set by the journal as it starts closing: reads end, tails return."""
        self._readers = Readers(path, synchronous, access, stand_ins)
        self._changed: dict[str, trio.Event] = {}
        self._token = token

    def wake(self, sessions: Iterable[str]) -> None:
        """Wake the tails of ``sessions``: records were committed to them."""
        for session in sessions:
            event = self._changed.pop(session, None)
            if event is not None:
                event.set()

    def close(self) -> None:
        """Close the idle reader connections (busy ones close when returned); end tails."""
        self._readers.close()
        for event in self._changed.values():
            event.set()
        self._changed.clear()

    # One loop on purpose: the read, the wait for other processes' appends and
    # the stream skipping share the last seq read, which a split would pass around.
    async def follow(
        self, session: str, after: int, *, follow: bool, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        # The digest of the record at ``after``: what the next record chains
        # from.  None until that record has been fetched.
        previous: bytes | None = GENESIS if after <= 0 else None
        after = max(after, 0)
        check = True
        decode = _decoder.decode
        new_hash, pack = _new_hash, _pack
        whole_from = 1
        while True:
            if self.closed:
                if follow:
                    return
                raise JournalClosedError(f"journal {self.url} was closed during a read")
            # Take the wakeup event before reading, so an append that commits
            # between the read and the wait is not missed.
            changed = self._changed_event(session) if follow else None
            fetch: _Fetch | None = self._start_fetch(
                session, after, previous is None, check, _FIRST_BATCH
            )
            check = False
            while fetch is not None:
                try:
                    rows, rule = await fetch.rows()
                except JournalClosedError:
                    if follow:
                        return
                    raise
                if rule:
                    whole_from = rule
                if len(rows) == fetch.limit and not self.closed:
                    # Fetch the next batch while this one is verified and decoded.
                    fetch = self._start_fetch(session, rows[-1][0], False, False, _READ_BATCH)
                else:
                    fetch = None
                if previous is None:
                    if not rows:
                        continue
                    # The first row should be the stored record at ``after`` itself.
                    if rows[0][0] != after:
                        raise JournalCorruptError(session, after, "it is missing")
                    previous = rows[0][5]
                    rows = rows[1:]
                expected = after + 1
                for seq, id, loop, at, cause, digest, body in rows:
                    if seq != expected:
                        raise JournalCorruptError(session, expected, "it is missing")
                    h = new_hash()
                    if seq >= whole_from:
                        h.update(pack((previous, seq, id, session, loop, at, cause)))
                    else:
                        h.update(previous)  # the body-only rule of schema 2
                    h.update(body)
                    if h.digest() != digest:
                        raise JournalCorruptError(session, seq, "digest chain broken")
                    if loop == skip_stream:
                        previous = digest
                        after = expected
                        expected += 1
                        continue
                    try:
                        event: Event = decode(body)
                    except msgspec.DecodeError:
                        if is_split(body):
                            # Stored with references: the one moment blobs are read.
                            body = await trio.to_thread.run_sync(self._join, session, seq, body)
                        # decode_event raises the translated error for these bytes.
                        event = decode_event(body, session=session, seq=seq)
                    yield Record(
                        seq=seq,
                        id=id,
                        session=session,
                        loop=loop,
                        at=at,
                        cause=cause,
                        digest=digest,
                        event=event,
                    )
                    previous = digest
                    after = expected
                    expected += 1
            if changed is None:
                if self.closed:
                    raise JournalClosedError(f"journal {self.url} was closed during a read")
                return
            with trio.move_on_after(self.poll):
                await changed.wait()

    def _changed_event(self, session: str) -> trio.Event:
        event = self._changed.get(session)
        if event is None:
            event = self._changed[session] = trio.Event()
        return event

    def _start_fetch(
        self, session: str, after: int, with_previous: bool, check: bool, limit: int
    ) -> _Fetch:
        # The limit counts the row at ``after`` too when it is fetched.
        limit += with_previous
        return _Fetch(
            lambda: self._fetch(session, after, with_previous, check, limit), limit, self._token
        )

    def _fetch(
        self, session: str, after: int, with_previous: bool, check: bool, limit: int
    ) -> _Batch:
        """Worker thread: the rows after seq ``after`` (from ``after`` itself when
        ``with_previous``, to learn the digest the next row chains from); with
        ``check``, also whether the session exists and its chain rule."""
        rule = 0
        try:
            with self._readers.connection() as conn:
                if check:
                    exists, whole_from = conn.execute(SELECT_SESSION, (session, session)).fetchone()
                    if not exists:
                        raise SessionNotFoundError(session)
                    rule = whole_from or 1
                if self._readers.closed:
                    raise JournalClosedError(f"journal {self.url} was closed during a read")
                start = after - 1 if with_previous else after
                return conn.execute(SELECT_BATCH, (session, start, limit)).fetchall(), rule
        except sqlite3.Error as exc:
            if damaged(exc):
                # Every record up to ``after`` was read and verified (or is
                # the one the caller starts after); the next one is not.
                raise JournalCorruptError(
                    session,
                    after + 1,
                    f"a damaged database page holds it or a later record ({exc}); "
                    "`loopruntime replay SESSION --check` names the damaged tables",
                ) from exc
            raise unavailable(exc, self.path, f"reading session {session}") from exc

    def _join(self, session: str, seq: int, body: bytes) -> bytes:
        """Worker thread: the event bytes of a record stored with references."""
        try:
            with self._readers.connection() as conn:
                found = fetch_blobs(conn, references(body))
        except sqlite3.Error as exc:
            if damaged(exc):
                raise JournalCorruptError(
                    session, seq, f"a damaged database page holds a blob it refers to ({exc})"
                ) from exc
            raise unavailable(exc, self.path, f"reading the blobs of session {session}") from exc
        return join(session, seq, body, found)

    async def head(self, session: str) -> int:
        return await trio.to_thread.run_sync(self._head, session)

    def _head(self, session: str) -> int:
        try:
            with self._readers.connection() as conn:
                exists, head = conn.execute(
                    "SELECT (SELECT 1 FROM sessions WHERE session = ?),"
                    " (SELECT max(seq) FROM records WHERE session = ?)",
                    (session, session),
                ).fetchone()
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, f"reading the head of session {session}") from exc
        if not exists:
            raise SessionNotFoundError(session)
        return int(head or 0)

    async def checkpoints(self, session: str) -> list[Record]:
        return await trio.to_thread.run_sync(self._on_reader, checkpoints, session)

    async def read_checkpointed(self, session: str, tail_limit: int) -> Checkpointed:
        return await trio.to_thread.run_sync(self._on_reader, checkpointed, session, tail_limit)

    def _on_reader(self, read: Callable[..., _T], session: str, *args: Any) -> _T:
        """Worker thread: ``read(conn, path, session, *args)`` on a reader connection."""
        try:
            with self._readers.connection() as conn:
                if self._readers.closed:
                    raise JournalClosedError(f"journal {self.url} was closed during a read")
                return read(conn, self.path, session, *args)
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, f"reading session {session}") from exc

    async def sessions(self) -> list[SessionInfo]:
        return await trio.to_thread.run_sync(self._sessions)

    async def check_storage(self) -> StorageCheck:
        return await trio.to_thread.run_sync(self._check_storage)

    def _check_storage(self) -> StorageCheck:
        """Worker thread: SQLite's quick check; when it finds damage, the same
        check table by table, to name the damaged ones."""
        checked = ("SQLite quick_check (every page of every table and index)",)
        try:
            with self._readers.connection() as conn:
                found = _quick_check(conn, None)
                if found is None:
                    return StorageCheck(checked=checked)
                problems = []
                try:
                    tables = [
                        row[0]
                        for row in conn.execute(
                            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                        )
                    ]
                except sqlite3.DatabaseError as exc:
                    tables = []
                    problems.append(StorageProblem(table="sqlite_master", detail=str(exc)))
                for table in tables:
                    damage = _quick_check(conn, table)
                    if damage is not None:
                        problems.append(StorageProblem(table=table, detail=damage))
                if not problems:
                    # Pages of no table: the free list, pages nothing points to.
                    problems.append(StorageProblem(table=None, detail=found))
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, "checking the file's integrity") from exc
        return StorageCheck(checked=checked, problems=tuple(problems))

    def _sessions(self) -> list[SessionInfo]:
        return list_sessions(self._readers, self.path)

    # -- the inbox ----------------------------------------------------------------

    async def inbox(self, session: str, after: int) -> list[InboxEntry]:
        rows = await trio.to_thread.run_sync(
            self.query,
            session,
            f"reading the inbox of session {session}",
            "SELECT number, key, body, created_at, consumed_at, outcome FROM inbox"
            " WHERE session = ? AND consumed_at IS NULL AND number > ? ORDER BY number",
            (session, after),
        )
        return [entry_of(session, row) for row in rows]

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        rows = await trio.to_thread.run_sync(
            self.query,
            session,
            f"reading the inbox of session {session}",
            "SELECT number, key, body, created_at, consumed_at, outcome FROM inbox"
            " WHERE session = ? AND key = ?",
            (session, key),
        )
        return entry_of(session, rows[0]) if rows else None

    def query(self, session: str, doing: str, statement: str, params: tuple[Any, ...]) -> list[Any]:
        """Blocking: ``statement``'s rows, once the session is known to exist."""
        return query_session(self._readers, self.path, session, doing, statement, params)

    async def claimable(self, definitions: list[str], owner: str | None, limit: int) -> list[Claim]:
        return await trio.to_thread.run_sync(self._claimable, definitions, owner, limit)

    def _claimable(self, definitions: list[str], owner: str | None, limit: int) -> list[Claim]:
        now = time.time_ns()
        names = ", ".join("?" * len(definitions))
        statement = (
            "WITH candidates AS ("
            " SELECT DISTINCT session FROM inbox WHERE consumed_at IS NULL"
            " UNION SELECT session FROM leases WHERE owner IS NOT NULL AND expires_at <= ?)"
            " SELECT c.session, l.owner, coalesce(l.expires_at, 0),"
            " (SELECT count(*) FROM inbox AS i"
            "  WHERE i.session = c.session AND i.consumed_at IS NULL),"
            " l.definition"
            " FROM candidates AS c LEFT JOIN leases AS l ON l.session = c.session"
            f" WHERE (l.definition IS NULL OR l.definition IN ({names}))"
            " AND (l.owner IS NULL OR l.expires_at <= ? OR l.owner = ?)"
            " LIMIT ?"
        )
        try:
            with self._readers.connection() as conn:
                rows = conn.execute(statement, (now, *definitions, now, owner, limit)).fetchall()
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, "finding sessions with work") from exc
        return [
            Claim(session=s, owner=o, expires_at=e, pending=p, definition=d)
            for s, o, e, p, d in rows
        ]

    async def hosts(self) -> list[HostInfo]:
        return await trio.to_thread.run_sync(self._hosts)

    def _hosts(self) -> list[HostInfo]:
        try:
            with self._readers.connection() as conn:
                return list_hosts(conn)
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, "listing hosts") from exc


def list_sessions(readers: Readers, path: str) -> list[SessionInfo]:
    """Blocking: every session, in creation order."""
    try:
        with readers.connection() as conn:
            rows = conn.execute(
                "SELECT s.session, s.incarnation, s.created_at, last.seq, last.at,"
                " l.owner, l.expires_at, l.definition,"
                " (SELECT count(*) FROM inbox AS i"
                "  WHERE i.session = s.session AND i.consumed_at IS NULL)"
                " FROM sessions AS s LEFT JOIN records AS last"
                " ON last.session = s.session AND last.seq = ("
                "  SELECT max(seq) FROM records WHERE session = s.session)"
                " LEFT JOIN leases AS l ON l.session = s.session"
                " ORDER BY s.rowid"
            ).fetchall()
    except sqlite3.Error as exc:
        raise unavailable(exc, path, "listing sessions") from exc
    now = time.time_ns()  # the clock the writer judges leases by
    return [
        SessionInfo(
            session=session,
            head=head or 0,
            incarnation=incarnation,
            created_at=created_at,
            updated_at=at if at is not None else created_at,
            owner=owner,
            expires_at=expires_at or 0,
            pending=pending,
            definition=definition,
            live=owner is not None and (expires_at or 0) > now,
        )
        for (
            session,
            incarnation,
            created_at,
            head,
            at,
            owner,
            expires_at,
            definition,
            pending,
        ) in rows
    ]


def query_session(
    readers: Readers, path: str, session: str, doing: str, statement: str, params: tuple[Any, ...]
) -> list[Any]:
    """Blocking: ``statement``'s rows, once the session is known to exist."""
    try:
        with readers.connection() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE session = ?", (session,)).fetchone():
                return conn.execute(statement, params).fetchall()
    except sqlite3.Error as exc:
        raise unavailable(exc, path, doing) from exc
    raise SessionNotFoundError(session)


def entry_of(session: str, row: tuple[Any, ...]) -> InboxEntry:
    """An inbox entry from its stored row ``(number, key, body, created_at,
    consumed_at, outcome)``; a command that does not decode is reported in
    ``damage``, never raised."""
    number, key, body, created_at, consumed_at, outcome = row
    command, damage = decode_entry(body)
    return InboxEntry(
        session=session,
        number=number,
        key=key,
        command=command,
        created_at=created_at,
        consumed_at=consumed_at,
        outcome=decode_outcome(outcome) if outcome is not None else None,
        damage=damage,
    )


def _quick_check(conn: sqlite3.Connection, table: str | None) -> str | None:
    """``PRAGMA quick_check`` (of one table and its indexes, with ``table``):
    None when it passes, else what it found (the first few lines)."""
    if table is None:
        pragma = "PRAGMA quick_check"
    else:
        quoted = table.replace('"', '""')
        pragma = f'PRAGMA quick_check("{quoted}")'
    try:
        lines = [row[0] for row in conn.execute(pragma).fetchmany(6)]
    except sqlite3.DatabaseError as exc:
        # Damage that stops the check itself (a root page it cannot parse).
        return str(exc)
    if lines == ["ok"]:
        return None
    return "; ".join(lines[:5]) + ("; ..." if len(lines) > 5 else "")
