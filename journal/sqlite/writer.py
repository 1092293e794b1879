"""The SQLite writer thread: every write of a journal, in group transactions.

Rules: one thread owns the writer connection; it takes everything waiting,
from every session, into one transaction and answers each request only after
the commit.  A request that fails (``journal.rules`` decides conflicts,
fencing and duplicates) fails alone.  The fast path checks each append
against a cache of each session's incarnation, head and digest, trusted only
while ``PRAGMA data_version`` says no other connection committed, and
inserts the group with one ``executemany``; anything it cannot settle sends
the group down the slow path, one savepoint per request.  The story is in
``docs/journal.md``.  It is one piece: every kind of request must pass
through both paths, which decide alike only while they share this module.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
import outcome
import trio

from ..codec import GENESIS
from ..errors import (
    ConflictError,
    DuplicateEventError,
    FencedError,
    JournalCorruptError,
    JournalError,
    LeaseHeldError,
    SessionNotFoundError,
)
from ..record import Record
from ..rules import (
    UNOWNED,
    LeaseState,
    Mark,
    Pending,
    Row,
    check_lease,
    decide_acquire,
    decide_append,
    decide_open,
    decide_release,
    decide_renew,
    plan_append,
    stored_records,
)
from ..store import SessionLease
from .blobs import store as store_blobs
from .leases import (
    EntryRow,
    consume,
    extend_leases,
    held_leases,
    host_op,
    insert_session,
    lease_state,
    put_entry,
    store_lease,
)
from .schema import unavailable
from .wal import WalReserve
from .writers import INSERT_WRITER, Span

__all__ = [
    "AppendRequest",
    "HostRequest",
    "LeaseRequest",
    "OpenRequest",
    "PutRequest",
    "RenewalsRequest",
    "Request",
    "SQLiteStatistics",
    "TakesRequest",
    "Writer",
]

_INSERT = (
    "INSERT INTO records (session, seq, id, loop, at, cause, digest, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHECKPOINT = "INSERT INTO checkpoints (session, seq) VALUES (?, ?)"

_MAX_GROUP = 4096
"""Requests per transaction (roughly: a hand-over is never split), so one commit
never grows without bound."""

_ID_CHUNK = 500
"""Ids per ``IN (...)`` lookup, well under SQLite's bound-parameter limit."""


class SQLiteStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the writer thread has done since the journal was opened."""

    transactions: int
    """Group transactions attempted (each one commit; at ``FULL`` one fsync)."""
    requests: int
    """Writes (``open_session`` and ``append`` calls) they carried."""
    largest_group: int
    """The most requests one transaction carried."""


# -- requests to the writer ----------------------------------------------------


class Request:
    """One write waiting for the writer thread.

    The writer sets ``result``; ``SQLiteJournal._deliver`` (on the trio thread)
    then wakes ``task`` with it, so the outcome the writer built is the one
    ``wait_task_rescheduled`` unwraps in the caller.  The task parked in
    ``_submit`` right after queueing the request (with no checkpoint between,
    so it is parked before any delivery).
    """

    __slots__ = ("result", "session", "task")

    def __init__(self, session: str) -> None:
        self.session = session
        self.task = trio.lowlevel.current_task()
        # Written by the writer thread before the group is handed back.
        self.result: outcome.Outcome[Any] | None = None


class OpenRequest(Request):
    __slots__ = ("create",)

    def __init__(self, session: str, create: bool) -> None:
        super().__init__(session)
        self.create = create


class LeaseRequest(Request):
    """``acquire``, ``renew`` or ``release`` (``op``)."""

    __slots__ = ("create", "definition", "handoff", "incarnation", "op", "owner", "ttl")

    def __init__(
        self,
        session: str,
        op: str,
        *,
        owner: str | None = None,
        ttl: int = 0,
        incarnation: int = 0,
        create: bool = False,
        handoff: bool = False,
        definition: str | None = None,
    ) -> None:
        super().__init__(session)
        self.op, self.owner, self.ttl, self.incarnation = op, owner, ttl, incarnation
        self.create, self.handoff, self.definition = create, handoff, definition


class RenewalsRequest(Request):
    """``renew_all``: ``(session, incarnation, owner)`` each; no one session's."""

    __slots__ = ("leases", "ttl")

    def __init__(self, leases: list[tuple[str, int, str | None]], ttl: int) -> None:
        super().__init__("")
        self.leases, self.ttl = leases, ttl


class TakesRequest(Request):
    """``acquire_all``: ``sessions`` for ``owner``; no one session's."""

    __slots__ = ("owner", "sessions", "ttl")

    def __init__(self, sessions: list[str], owner: str, ttl: int) -> None:
        super().__init__("")
        self.sessions, self.owner, self.ttl = sessions, owner, ttl


class PutRequest(Request):
    __slots__ = ("body", "definition", "key")

    def __init__(self, session: str, key: str, body: bytes, definition: str | None) -> None:
        super().__init__(session)
        self.key, self.body, self.definition = key, body, definition


class HostRequest(Request):
    """``register_host`` (``ttl`` > 0) or ``deregister_host``; no session's."""

    __slots__ = ("definitions", "host", "token", "ttl")

    def __init__(self, host: str, token: str, definitions: tuple[str, ...], ttl: int) -> None:
        super().__init__("")
        self.host, self.token, self.definitions, self.ttl = host, token, definitions, ttl


class AppendRequest(Request):
    __slots__ = ("blobs", "consumes", "expected_seq", "incarnation", "owner", "pending")

    def __init__(
        self,
        lease: SessionLease,
        pending: list[Pending],
        expected_seq: int,
        consumes: list[tuple[int, bytes]] | None = None,
        blobs: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(lease.session)
        self.incarnation = lease.incarnation
        self.owner = lease.owner
        self.pending = pending
        self.expected_seq = expected_seq
        self.consumes = consumes
        """Inbox entries this append applies: ``(number, outcome bytes)``."""
        self.blobs = blobs  # stored with its records (journal.blobs)


class _State:
    """The writer's view of one session: what an append validates against."""

    __slots__ = ("created_at", "digest", "head", "incarnation", "spanned")

    def __init__(self, incarnation: int, head: int, digest: bytes, created_at: int) -> None:
        self.incarnation, self.head, self.digest, self.created_at = (
            incarnation,
            head,
            digest,
            created_at,
        )
        self.spanned: int | None = None
        """The incarnation this writer last stored a writer span for, when it
        knows: its appends need none more (``INSERT_WRITER`` decides otherwise)."""

    def copy(self) -> _State:
        state = _State(self.incarnation, self.head, self.digest, self.created_at)
        state.spanned = self.spanned
        return state


class _Retry(Exception):
    """The optimistic group insert tripped a constraint: replay the group slowly."""


class Writer:
    """The one writer thread and its connection.  Everything here runs in that thread."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        deliver: Callable[[list[Request], set[str]], None],
        token: trio.lowlevel.TrioToken,
        reserve: WalReserve | None = None,
    ) -> None:
        """``reserve``: the WAL room written ahead (``wal.py``), at ``FULL`` only."""
        self.conn = conn
        self.path = path
        self.reserve = reserve
        self.queue: queue.SimpleQueue[list[Request] | None] = queue.SimpleQueue()
        """Lists of requests; ``None`` asks the thread to stop after what precedes it."""
        self._deliver = deliver
        self._token = token
        self._cache: dict[str, _State] = {}
        self._data_version = -1
        # Counters for statistics(); written by this thread only.
        self.transactions = self.requests = self.largest_group = 0
        self.thread = threading.Thread(
            target=self._run, name=f"loopruntime-journal-writer {path}", daemon=True
        )

    # -- the thread -----------------------------------------------------------

    def _run(self) -> None:
        stop = False
        try:
            while not stop:
                group = self.queue.get()
                if group is None:
                    break
                # Everything else already waiting joins this transaction.
                while len(group) < _MAX_GROUP:
                    try:
                        more = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    group = group + more
                self.transactions += 1
                self.requests += len(group)
                self.largest_group = max(self.largest_group, len(group))
                changed = self._commit_group(group)
                self._hand_back(group, changed)
        finally:
            self.conn.close()
            if self.reserve is not None:
                self.reserve.close()

    def _hand_back(self, group: list[Request], changed: set[str]) -> None:
        # The trio side may already be gone (run finished); then nobody waits.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, group, changed)

    def _commit_group(self, group: list[Request]) -> set[str]:
        """Apply ``group`` in one transaction; set every request's result.

        Returns the sessions that received records.  Never raises: a failure of
        the transaction itself becomes every request's error.
        """
        work: dict[str, _State] = {}
        try:
            self._begin()
            try:
                changed = self._apply_fast(group)
            except _Retry:
                # SQLite ends the transaction itself after some failures (a
                # full disk, an I/O error); the slow path then meets them again.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                # The fast path advanced the cache in place; forget it.
                self._cache.clear()
                self._begin()
                work, changed = self._apply_slow(group)
            self.conn.execute("COMMIT")
        except Exception as exc:
            # The transaction is lost as a whole: nothing of this group is
            # stored, so every request fails, including ones that validated.
            self._cache.clear()
            if self.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self.conn.execute("ROLLBACK")
            error = (
                unavailable(exc, self.path, "committing appends")
                if isinstance(exc, sqlite3.Error)
                else exc
            )
            if error is not exc:
                error.__cause__ = exc
            for request in group:
                request.result = outcome.Error(error)
            return set()
        self._cache.update(work)  # what the slow path changed, if it ran
        return changed

    def _begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        if self.reserve is not None:
            # Under the write lock: no other connection appends frames now.
            self.reserve.extend()
        # data_version changes only when *another* connection commits; then the
        # cached heads and incarnations may be stale and are reloaded.
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._cache.clear()
            self._data_version = version

    def _state(self, session: str, work: dict[str, _State]) -> _State | None:
        """The session as this transaction sees it; ``work`` holds this group's changes."""
        state = work.get(session)
        if state is not None:
            return state
        cached = self._cache.get(session)
        if cached is None:
            row = self.conn.execute(
                "SELECT incarnation, created_at FROM sessions WHERE session = ?", (session,)
            ).fetchone()
            if row is None:
                return None
            last = self.conn.execute(
                "SELECT seq, digest FROM records WHERE session = ? ORDER BY seq DESC LIMIT 1",
                (session,),
            ).fetchone()
            head, digest = (last[0], last[1]) if last is not None else (0, GENESIS)
            cached = self._cache[session] = _State(row[0], head, digest, row[1])
        state = work[session] = cached.copy()
        return state

    # -- the two ways through a group ------------------------------------------

    def _apply_fast(self, group: list[Request]) -> set[str]:
        """Validate against cached state and insert all rows with one executemany.

        Advances the cache in place rather than in a copy per session (this
        loop runs once per append): if the group does not commit,
        ``_commit_group`` clears the cache and it is reloaded from the tables.
        """
        cache = self._cache
        rows: list[Row] = []
        marks: list[Mark] = []
        spans: list[Span] = []
        changed: set[str] = set()
        now = time.time_ns()
        plan, value = plan_append, outcome.Value
        for request in group:
            try:
                if type(request) is not AppendRequest:
                    request.result = value(self._other(request, cache, now))
                    continue
                state = cache.get(request.session)
                if state is None or request.incarnation != state.incarnation:
                    state = self._checked_state(request, cache)
                if request.expected_seq != state.head:
                    # The ids may already be stored (an idempotent retry); the
                    # lookup must also see rows this group has not flushed yet.
                    self._flush_fast(rows, marks, spans)
                    stored = self._stored_or_conflict(request, state)
                    if request.consumes:
                        self._consume(request, now)
                    request.result = value(stored)
                    continue
                if request.consumes:
                    # Decided before the plan: a refusal leaves nothing planned.
                    self._consume(request, now)
                records = plan(
                    request.session, state.head, state.digest, request.pending, now, rows, marks
                )
                if records:
                    last = records[-1]
                    state.head, state.digest = last.seq, last.digest
                    if state.spanned != request.incarnation:
                        state.spanned = request.incarnation
                        spans.append(
                            (request.session, records[0].seq, request.incarnation, request.owner)
                        )
                if request.blobs:
                    store_blobs(self.conn, request.blobs)
            except JournalError as exc:
                request.result = outcome.Error(exc)
                continue
            except _Retry:
                raise
            except Exception as exc:
                # Anything else (a value over SQLite's length limit, a value
                # sqlite3 cannot bind) may be this request's fault alone; only
                # the slow path, one savepoint per request, can tell.
                raise _Retry from exc
            if records:
                changed.add(request.session)
            request.result = value(records)
        self._flush_fast(rows, marks, spans)
        return changed

    def _flush_fast(self, rows: list[Row], marks: list[Mark], spans: list[Span]) -> None:
        """Insert the planned record rows, their checkpoint index rows and writer spans."""
        if not rows:
            return
        try:
            self.conn.executemany(_INSERT, rows)
            if marks:
                self.conn.executemany(_INSERT_CHECKPOINT, marks)
            if spans:
                self.conn.executemany(INSERT_WRITER, spans)
        except Exception as exc:
            # A constraint (an id already stored, a lost race) or a row of one
            # request SQLite refuses: the slow path finds whose it is.
            raise _Retry from exc
        rows.clear()
        marks.clear()
        spans.clear()

    def _apply_slow(self, group: list[Request]) -> tuple[dict[str, _State], set[str]]:
        """Each request under its own savepoint, with every check made explicitly."""
        work: dict[str, _State] = {}
        changed: set[str] = set()
        now = time.time_ns()
        for request in group:
            self.conn.execute("SAVEPOINT request")
            # A request changes only its own session's state; keep it to undo.
            before = work.get(request.session)
            before = before.copy() if before is not None else None
            try:
                if not isinstance(request, AppendRequest):
                    request.result = outcome.Value(self._other(request, work, now))
                else:
                    assert isinstance(request, AppendRequest)
                    state = self._checked_state(request, work)
                    records, inserted = self._append_slow(request, state, now)
                    if inserted:
                        changed.add(request.session)
                    request.result = outcome.Value(records)
            except Exception as exc:
                if not self.conn.in_transaction:
                    # SQLite gave up the whole transaction (it may, on a full
                    # disk or an I/O error): what this group did before is
                    # gone too, so the group fails as a whole.
                    raise
                self.conn.execute("ROLLBACK TO request")
                if before is None:
                    work.pop(request.session, None)
                else:
                    work[request.session] = before
                if isinstance(exc, sqlite3.Error):
                    exc = unavailable(exc, self.path, f"writing session {request.session!r:.80}")
                request.result = outcome.Error(exc)
            self.conn.execute("RELEASE request")
        return work, changed

    def _append_slow(
        self, request: AppendRequest, state: _State, now: int
    ) -> tuple[list[Record], bool]:
        """Returns the records and whether they were inserted (not already stored)."""
        rows: list[Row] = []
        marks: list[Mark] = []
        records, fresh = decide_append(
            request.session,
            request.expected_seq,
            state.head,
            state.digest,
            request.pending,
            self._lookup(request),
            now,
            rows,
            marks,
        )
        if request.consumes:
            self._consume(request, now)
        if not fresh:
            return records, False
        if request.blobs:
            store_blobs(self.conn, request.blobs)
        try:
            self.conn.executemany(_INSERT, rows)
            if marks:
                self.conn.executemany(_INSERT_CHECKPOINT, marks)
            if rows:
                self.conn.execute(
                    INSERT_WRITER,
                    (request.session, rows[0][1], request.incarnation, request.owner),
                )
        except sqlite3.IntegrityError as exc:
            raise self._integrity(request, exc) from exc
        if records:
            state.head, state.digest = records[-1].seq, records[-1].digest
        return records, bool(records)

    def _integrity(self, request: AppendRequest, exc: sqlite3.IntegrityError) -> JournalError:
        """The one place a lost race or a duplicate id, as a constraint, becomes an error."""
        message = str(exc)
        if message.startswith("UNIQUE") and "records.id" in message:
            # Ids already stored were checked before the insert, and ids repeated
            # within one append are refused before it reaches the writer.
            return DuplicateEventError(request.session, request.pending[0][0])
        if message.startswith("UNIQUE") and "checkpoints.seq" in message:
            # The records went in, so the index already named a seq that held
            # no record: damage, not a race (the head has not moved).  Undone
            # first, so only the entries that were there before are seen.
            self.conn.execute("ROLLBACK TO request")
            stray = self.conn.execute(
                "SELECT min(seq) FROM checkpoints WHERE session = ? AND seq > ?",
                (request.session, request.expected_seq),
            ).fetchone()[0]
            return JournalCorruptError(
                request.session, stray, "the checkpoint index names it before it was written"
            )
        if not (message.startswith("UNIQUE") and "records.seq" in message):
            return unavailable(exc, self.path, f"writing session {request.session!r:.80}")
        row = self.conn.execute(
            "SELECT max(seq) FROM records WHERE session = ?", (request.session,)
        ).fetchone()
        self._cache.pop(request.session, None)
        return ConflictError(request.session, request.expected_seq, row[0] or 0)

    # -- the rules ---------------------------------------------------------------

    def _other(self, request: Request, work: dict[str, _State], now: int) -> Any:
        """A write that appends no records: a lease or an inbox entry."""
        if isinstance(request, OpenRequest):
            return self._open(request, work, now)
        if isinstance(request, LeaseRequest):
            return self._lease_op(request, work, now)
        if isinstance(request, RenewalsRequest):
            return self._renew_all(request, work, now)
        if isinstance(request, TakesRequest):
            return self._acquire_all(request, work, now)
        if isinstance(request, HostRequest):
            return host_op(
                self.conn, request.host, request.token, request.definitions, now, request.ttl
            )
        assert isinstance(request, PutRequest)
        return self._put(request, work, now)

    def _set_lease(
        self, session: str, state: _State, lease: LeaseState, definition: str | None
    ) -> None:
        store_lease(self.conn, session, state.incarnation, lease, definition)
        state.incarnation = lease[0]

    def _new_session(
        self, session: str, work: dict[str, _State], now: int, incarnation: int = 0
    ) -> _State:
        insert_session(self.conn, session, now, incarnation)
        state = work[session] = _State(incarnation, 0, GENESIS, now)
        return state

    def _open(self, request: OpenRequest, work: dict[str, _State], now: int) -> SessionLease:
        session = request.session
        state = self._state(session, work)
        if state is None:
            if not request.create:
                raise SessionNotFoundError(session)
            # A new session has no lease to read (every session is stored with
            # its lease row, and neither is ever deleted), and it is stored at
            # the incarnation its opening gives it: two statements, not four.
            opened = decide_open(session, (0, None, 0), now)
            state = self._new_session(session, work, now, opened[0])
            store_lease(self.conn, session, state.incarnation, opened, None)
        else:
            lease = lease_state(self.conn, session, state.incarnation)
            self._set_lease(session, state, decide_open(session, lease, now), None)
        return SessionLease(session=session, incarnation=state.incarnation, head=state.head)

    def _lease_op(
        self, request: LeaseRequest, work: dict[str, _State], now: int
    ) -> SessionLease | None:
        session = request.session
        state = self._state(session, work)
        if state is None:
            if not (request.op == "acquire" and request.create):
                raise SessionNotFoundError(session)
            state = self._new_session(session, work, now)
        lease = lease_state(self.conn, session, state.incarnation)
        if request.op == "acquire":
            assert request.owner is not None
            after = decide_acquire(session, request.owner, lease, now, request.ttl)
        elif request.op == "renew":
            after = decide_renew(
                session, request.incarnation, request.owner, lease, now, request.ttl
            )
        else:
            after = decide_release(session, request.incarnation, lease, request.handoff)
        self._set_lease(session, state, after, request.definition)
        if request.op == "release":
            return None
        return SessionLease(
            session=session,
            incarnation=after[0],
            head=state.head,
            owner=after[1],
            expires_at=after[2],
        )

    def _renew_all(
        self, request: RenewalsRequest, work: dict[str, _State], now: int
    ) -> list[SessionLease | None]:
        """Every lease of ``request`` decided by ``rules.decide_renew`` (None
        for one lost), the renewed ones written by one statement."""
        held = held_leases(self.conn, [session for session, _, _ in request.leases])
        renewed: list[SessionLease | None] = []
        expiries: list[tuple[int, str]] = []
        for session, incarnation, owner in request.leases:
            state = self._state(session, work)
            if state is None:
                renewed.append(None)
                continue
            current: LeaseState = (state.incarnation, *held.get(session, (None, 0)))
            try:
                after = decide_renew(session, incarnation, owner, current, now, request.ttl)
            except FencedError:
                renewed.append(None)
                continue
            expiries.append((after[2], session))
            renewed.append(
                SessionLease(
                    session=session,
                    incarnation=after[0],
                    head=state.head,
                    owner=after[1],
                    expires_at=after[2],
                )
            )
        extend_leases(self.conn, expiries)
        return renewed

    def _acquire_all(
        self, request: TakesRequest, work: dict[str, _State], now: int
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        """Every session of ``request`` decided by ``rules.decide_acquire`` in
        order, a refused one's error in its place; the owners read at once."""
        held = held_leases(self.conn, request.sessions)
        taken: list[SessionLease | LeaseHeldError | SessionNotFoundError] = []
        for session in request.sessions:
            state = self._state(session, work)
            if state is None:
                taken.append(SessionNotFoundError(session))
                continue
            current: LeaseState = (state.incarnation, *held.get(session, (None, 0)))
            try:
                after = decide_acquire(session, request.owner, current, now, request.ttl)
            except LeaseHeldError as exc:
                taken.append(exc)
                continue
            self._set_lease(session, state, after, None)
            held[session] = (request.owner, after[2])  # a session named twice sees its take
            taken.append(
                SessionLease(
                    session=session,
                    incarnation=after[0],
                    head=state.head,
                    owner=after[1],
                    expires_at=after[2],
                )
            )
        return taken

    def _put(self, request: PutRequest, work: dict[str, _State], now: int) -> EntryRow:
        session = request.session
        if self._state(session, work) is None:
            if request.definition is None:
                raise SessionNotFoundError(session)
            state = self._new_session(session, work, now)
            self._set_lease(session, state, UNOWNED, request.definition)
        return put_entry(self.conn, session, request.key, request.body, now)

    def _consume(self, request: AppendRequest, now: int) -> None:
        """Mark the entries ``request`` applies, as ``rules.decide_consumes`` decides."""
        assert request.consumes
        consume(self.conn, request.session, request.consumes, now)

    def _checked_state(self, request: AppendRequest, work: dict[str, _State]) -> _State:
        state = self._state(request.session, work)
        if state is None:
            raise SessionNotFoundError(request.session)
        check_lease(request.session, request.incarnation, state.incarnation)
        return state

    def _stored_or_conflict(self, request: AppendRequest, state: _State) -> list[Record]:
        stored = stored_records(request.session, request.pending, self._lookup(request))
        if stored is None:
            raise ConflictError(request.session, request.expected_seq, state.head)
        return stored

    def _lookup(self, request: AppendRequest) -> list[Row | None]:
        """The stored row of each draft's id (None where it is not stored)."""
        if not request.pending:
            return []
        found: dict[str, Row] = {}
        ids = [p[0] for p in request.pending]
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for row in self.conn.execute(
                "SELECT session, seq, id, loop, at, cause, digest, body FROM records"
                f" WHERE session = ? AND id IN ({marks})",
                (request.session, *chunk),
            ):
                found[row[2]] = row
        return [found.get(id) for id in ids]
