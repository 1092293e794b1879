"""SQLite journal: the embedded default backend (``sqlite:///path/to/file.db``).

URL form
    ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (the part
    after ``sqlite:///`` is the filesystem path, as in SQLAlchemy).  Query
    options: ``synchronous=NORMAL`` (default) or ``synchronous=FULL``, and
    ``poll=<seconds>`` (how often a ``tail`` looks for appends made by other
    processes; default 0.25).

Durability
    The database runs in WAL mode.  With ``synchronous=NORMAL`` a committed
    append survives a crash of the process but the last commits may be lost
    to a power failure or an OS crash; ``synchronous=FULL`` fsyncs the WAL on
    every commit and survives those too, at the cost of one fsync per group.

Writing: one writer thread, group commit
    Every write (``open_session``, ``append``) is handed to ONE dedicated
    writer thread over a queue.  The thread takes everything that is waiting
    at that moment, from every session, and applies it in one transaction:
    one commit (and at ``FULL`` one fsync) for the whole group.  Each caller is
    released only after that commit.  A failing request in the group
    (conflict, fencing, duplicate id, a value over SQLite's length limit)
    fails alone; the others commit.

    The fast path validates each request against the writer's cached view of
    each session (incarnation, head seq, last digest) and inserts the whole
    group with one ``executemany``.  The cache is trusted only while
    ``PRAGMA data_version`` says no other connection has committed; otherwise
    it is reloaded from the tables.  If the insert trips a constraint (an id
    already stored, a race with another process), or SQLite refuses anything
    else a request asks of it, the group is rolled back and replayed request
    by request, each under its own savepoint, with explicit checks: the slow
    path decides idempotent re-appends and duplicates, and fails a refused
    request alone.

Reading
    Readers use their own connections, in worker threads, fetching a few
    thousand rows per batch; the next batch is fetched while this one's digest
    chain is verified and its events decoded on the trio side (records are
    built as they are consumed, so they die young instead of piling up for the
    garbage collector).  The trio thread never waits on the disk.  ``tail`` is woken at
    once by appends made through this journal object and polls (one indexed
    query) for appends made by other processes.  ``checkpoints`` is one query
    over the checkpoint index joined with the records it names and the record
    before each (whose digest each checkpoint is verified against).

Layout (schema version ``codec.SCHEMA_VERSION``)
    ``journal_meta(key, value)`` holds ``format = loopruntime-journal`` and
    ``schema_version``; ``sessions(session, incarnation, created_at)``;
    ``records(session, seq, id, loop, at, cause, digest, body)`` with primary
    key ``(session, seq)`` and a unique index on ``(session, id)``.  ``body`` is
    ``codec.encode_event`` bytes.  A session's head is its largest seq, so an
    append writes only its record rows (and, for each ``session.checkpoint``
    among them, a row of the index below, in the same transaction).
    ``checkpoints(session, seq)``, primary key ``(session, seq)``, lists the
    seqs of the ``session.checkpoint`` records.

    Version 1 had no ``checkpoints`` table.  Opening a version-1 file upgrades
    it in place, in one transaction: the table is created (empty: version 1
    had no checkpoint records) and ``schema_version`` is set to 2.  A file of
    a newer version is refused with ``JournalSchemaError``.

Every ``sqlite3`` exception is translated to a ``JournalError`` in this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs

import msgspec
import outcome
import trio

from .codec import (
    GENESIS,
    SCHEMA_VERSION,
    check_schema_version,
    checkpoint_records,
    decode_event,
    encode_checked,
)
from .errors import (
    ConflictError,
    DuplicateEventError,
    FencedError,
    JournalClosedError,
    JournalCorruptError,
    JournalError,
    JournalUnavailableError,
    NotAJournalError,
    SessionNotFoundError,
)
from .events import Event, SessionCheckpoint
from .record import Draft, Record, check_drafts, check_text
from .store import SessionInfo, SessionLease

__all__ = ["SQLiteJournal", "SQLiteStatistics"]

_FORMAT = "loopruntime-journal"

# The index of session.checkpoint records (schema version 2).  WITHOUT ROWID:
# the primary key is the whole row.
_CHECKPOINTS_TABLE = (
    "CREATE TABLE checkpoints ("
    " session TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " PRIMARY KEY (session, seq)) WITHOUT ROWID"
)

_SCHEMA = (
    "CREATE TABLE journal_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # A rowid table: ORDER BY rowid lists sessions in creation order.
    "CREATE TABLE sessions ("
    " session TEXT NOT NULL UNIQUE,"
    " incarnation INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL)",
    # A rowid table rather than WITHOUT ROWID: bodies (tool results, messages)
    # are often kilobytes, which WITHOUT ROWID tables store badly.
    "CREATE TABLE records ("
    " session TEXT NOT NULL,"
    " seq INTEGER NOT NULL,"
    " id TEXT NOT NULL,"
    " loop TEXT NOT NULL,"
    " at INTEGER NOT NULL,"
    " cause TEXT,"
    " digest BLOB NOT NULL,"
    " body BLOB NOT NULL,"
    " PRIMARY KEY (session, seq))",
    "CREATE UNIQUE INDEX records_by_id ON records (session, id)",
    _CHECKPOINTS_TABLE,
)

_UPGRADES: dict[int, tuple[str, ...]] = {1: (_CHECKPOINTS_TABLE,)}
"""The statements that take a file from schema version ``key`` to ``key + 1``."""

_INSERT = (
    "INSERT INTO records (session, seq, id, loop, at, cause, digest, body)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHECKPOINT = "INSERT INTO checkpoints (session, seq) VALUES (?, ?)"
# The checkpoint's record and the digest of the record before it (NULL for
# seq 1, which chains from GENESIS, or when that record is missing).
_SELECT_CHECKPOINTS = (
    "SELECT c.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, p.digest"
    " FROM checkpoints AS c"
    " LEFT JOIN records AS r ON r.session = c.session AND r.seq = c.seq"
    " LEFT JOIN records AS p ON p.session = c.session AND p.seq = c.seq - 1"
    " WHERE c.session = ? ORDER BY c.seq"
)
_SELECT_BATCH = (
    "SELECT seq, id, loop, at, cause, digest, body FROM records"
    " WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?"
)

_READ_BATCH = 4096
"""Rows per reader round trip: large enough that the thread hop is noise."""

_FIRST_BATCH = 512
"""Rows in a read's first round trip: small, so the first record comes soon."""

_WAL_CHECKPOINT_PAGES = 4000
"""WAL pages after which a commit copies the WAL into the database (SQLite's
default is 1000).  That checkpoint runs inside the commit that crosses the
line, syncs the database file, and copies each page once however often it
was rewritten: with 4000 (a WAL of up to ~16 MiB while open) a long agent
loop pays for a quarter as many of them, and the last steps of a 3000-step
turn measured about 15% cheaper at ``synchronous=NORMAL``.  A checkpoint run
from a thread of its own was measured too and dropped: running beside the
writer it never caught up, so the WAL was never reset and grew without bound."""

_MAX_GROUP = 4096
"""Requests per transaction (roughly: a hand-over is never split), so one commit
never grows without bound."""

_ID_CHUNK = 500
"""Ids per ``IN (...)`` lookup, well under SQLite's bound-parameter limit."""

_BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for another process's lock before failing."""

_DEFAULT_POLL = 0.25

# The chain step of codec.chain, inlined in the hot loops: copying a fresh
# blake2b-128 state is cheaper than constructing one (which parses its keyword
# arguments every time), a quarter off each step.
_new_hash = hashlib.blake2b(digest_size=16).copy
# A decoder of our own so the read loop calls it directly; failures go through
# codec.decode_event, which names the seq and tells a schema error from damage.
_decoder = msgspec.msgpack.Decoder(Event)


# -- URL ----------------------------------------------------------------------


class _Options:
    __slots__ = ("path", "poll", "synchronous")

    def __init__(self, path: str, synchronous: str, poll: float) -> None:
        self.path, self.synchronous, self.poll = path, synchronous, poll


def _parse_url(url: str) -> _Options:
    if not url.startswith("sqlite:"):
        raise ValueError(f"{url!r} is not a sqlite: journal URL")
    rest, _, query = url[len("sqlite:") :].partition("?")
    if rest.startswith("///"):
        path = rest[3:]
    elif rest.startswith("//"):
        raise ValueError(
            f"journal URL {url!r} names a host; use 'sqlite:///relative/path.db' or "
            "'sqlite:////absolute/path.db'"
        )
    else:
        path = rest
    if not path or path == ":memory:" or path.startswith("file:"):
        raise ValueError(
            f"journal URL {url!r} does not name a database file; use "
            "'sqlite:///path/to/file.db' (or 'memory:' for a journal that is not kept)"
        )
    synchronous, poll = "NORMAL", _DEFAULT_POLL
    for key, values in parse_qs(query, keep_blank_values=True, strict_parsing=False).items():
        value = values[-1]
        if key == "synchronous":
            synchronous = value.upper()
            if synchronous not in ("NORMAL", "FULL"):
                raise ValueError(
                    f"journal URL {url!r}: synchronous must be NORMAL or FULL, not {value!r}"
                )
        elif key == "poll":
            try:
                poll = float(value)
            except ValueError:
                poll = -1.0
            if not poll > 0:
                raise ValueError(
                    f"journal URL {url!r}: poll must be a positive number of seconds, not {value!r}"
                )
        else:
            raise ValueError(
                f"journal URL {url!r}: unknown option {key!r}; known options are "
                "synchronous=NORMAL|FULL and poll=<seconds>"
            )
    return _Options(path, synchronous, poll)


# -- translating sqlite3 errors ------------------------------------------------


def _unavailable(exc: sqlite3.Error, path: str, doing: str) -> JournalError:
    """The one translation of a sqlite3 failure that is not a journal rule."""
    if isinstance(exc, sqlite3.DataError):
        # SQLITE_TOOBIG, the one failure sqlite3 reports as DataError: retrying
        # the same write can only fail again.
        return JournalError(
            f"sqlite journal {path}: {doing} failed: {exc} (a string or blob, or a "
            "whole record, is longer than SQLite's length limit); store less in one event"
        )
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return JournalUnavailableError(
            f"sqlite journal {path}: {doing} failed because another process held the "
            f"database lock for longer than {_BUSY_TIMEOUT_MS} ms ({exc}); retry later"
        )
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return NotAJournalError(
            f"{path} is not a SQLite database ({exc}); point the journal URL at a "
            "loopruntime journal file or at a path where a new one may be created"
        )
    return JournalUnavailableError(f"sqlite journal {path}: {doing} failed: {exc}")


# -- schema --------------------------------------------------------------------


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    # isolation_level=None: this module issues BEGIN/COMMIT itself.
    # check_same_thread=False: reader connections move between trio's worker
    # threads (never used by two threads at once: the pool hands each out once).
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def _create_file(path: str) -> None:
    """Create the database file with mode 0600 before SQLite does (it would use 0644).

    SQLite gives the ``-wal`` and ``-shm`` files the main file's permissions.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise JournalUnavailableError(
            f"cannot create journal file {path}: {exc.strerror}; check that the "
            "directory exists and is writable"
        ) from exc
    os.close(fd)


def _prepare(path: str, synchronous: str) -> sqlite3.Connection:
    """Open (creating if empty) the journal at ``path``; return the writer connection."""
    _create_file(path)
    try:
        conn = _connect(path, synchronous)
    except sqlite3.Error as exc:
        raise _unavailable(exc, path, "opening") from exc
    try:
        _check_or_create_schema(conn, path)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalUnavailableError(
                f"sqlite journal {path}: the file system refused WAL mode (got {mode!r}); "
                "put the journal on a local disk"
            )
        conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_CHECKPOINT_PAGES}")
    except JournalError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise _unavailable(exc, path, "opening") from exc
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_or_create_schema(conn: sqlite3.Connection, path: str) -> None:
    tables = _tables(conn)
    if not tables:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have created the journal while we waited.
            if not _tables(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO journal_meta (key, value) VALUES (?, ?)",
                    [("format", _FORMAT), ("schema_version", str(SCHEMA_VERSION))],
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        tables = _tables(conn)
    if "journal_meta" not in tables:
        raise NotAJournalError(
            f"{path} is a SQLite database but not a loopruntime journal (it has tables "
            f"{sorted(tables)} and no journal_meta); choose another file"
        )
    meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
    if meta.get("format") != _FORMAT:
        raise NotAJournalError(
            f"{path} has a journal_meta table but is not a loopruntime journal "
            f"(format {meta.get('format')!r}); choose another file"
        )
    version = _schema_version(meta)
    check_schema_version(version, where=f"journal {path}")
    if version < SCHEMA_VERSION:
        _upgrade(conn)


def _schema_version(meta: dict[str, str]) -> int:
    try:
        return int(meta.get("schema_version", "0"))
    except ValueError:
        return 0


def _upgrade(conn: sqlite3.Connection) -> None:
    """Bring an older journal to ``SCHEMA_VERSION`` in one transaction.

    Atomic: a crash or a failure leaves the file at its old version.  Safe
    against another process upgrading the same file at the same moment (the
    version is read again under the write lock).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        meta = dict(conn.execute("SELECT key, value FROM journal_meta").fetchall())
        version = _schema_version(meta)
        while version < SCHEMA_VERSION:
            for statement in _UPGRADES[version]:
                conn.execute(statement)
            version += 1
        conn.execute(
            "UPDATE journal_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SQLiteStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What the writer thread has done since the journal was opened."""

    transactions: int
    """Group transactions attempted (each one commit; at ``FULL`` one fsync)."""
    requests: int
    """Writes (``open_session`` and ``append`` calls) they carried."""
    largest_group: int
    """The most requests one transaction carried."""


# -- requests to the writer ----------------------------------------------------


class _Request:
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


class _OpenRequest(_Request):
    __slots__ = ("create",)

    def __init__(self, session: str, create: bool) -> None:
        super().__init__(session)
        self.create = create


_Pending = tuple[str, str, str | None, Event, bytes]
"""A draft encoded once on the trio thread: ``(id, loop, cause, event, body)``.

A plain tuple rather than a class: one is built per appended event, and a
tuple costs a tenth of an instance with ``__init__``."""


class _AppendRequest(_Request):
    __slots__ = ("expected_seq", "incarnation", "pending")

    def __init__(self, lease: SessionLease, pending: list[_Pending], expected_seq: int) -> None:
        super().__init__(lease.session)
        self.incarnation = lease.incarnation
        self.pending = pending
        self.expected_seq = expected_seq


class _State:
    """The writer's view of one session: what an append validates against."""

    __slots__ = ("created_at", "digest", "head", "incarnation")

    def __init__(self, incarnation: int, head: int, digest: bytes, created_at: int) -> None:
        self.incarnation, self.head, self.digest, self.created_at = (
            incarnation,
            head,
            digest,
            created_at,
        )

    def copy(self) -> _State:
        return _State(self.incarnation, self.head, self.digest, self.created_at)


class _Retry(Exception):
    """The optimistic group insert tripped a constraint: replay the group slowly."""


class _Writer:
    """The one writer thread and its connection.  Everything here runs in that thread."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        deliver: Callable[[list[_Request], set[str]], None],
        token: trio.lowlevel.TrioToken,
    ) -> None:
        self.conn = conn
        self.path = path
        self.queue: queue.SimpleQueue[list[_Request] | None] = queue.SimpleQueue()
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

    def _hand_back(self, group: list[_Request], changed: set[str]) -> None:
        # The trio side may already be gone (run finished); then nobody waits.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, group, changed)

    def _commit_group(self, group: list[_Request]) -> set[str]:
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
                _unavailable(exc, self.path, "committing appends")
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

    def _apply_fast(self, group: list[_Request]) -> set[str]:
        """Validate against cached state and insert all rows with one executemany.

        Advances the cache in place rather than in a copy per session (this
        loop runs once per append): if the group does not commit,
        ``_commit_group`` clears the cache and it is reloaded from the tables.
        """
        cache = self._cache
        rows: list[tuple[Any, ...]] = []
        marks: list[tuple[str, int]] = []
        changed: set[str] = set()
        now = time.time_ns()
        plan, value = self._plan, outcome.Value
        for request in group:
            try:
                if type(request) is _OpenRequest:
                    request.result = value(self._open(request, cache, now))
                    continue
                assert isinstance(request, _AppendRequest)
                state = cache.get(request.session)
                if state is None or request.incarnation != state.incarnation:
                    state = self._checked_state(request, cache)
                if request.expected_seq != state.head:
                    # The ids may already be stored (an idempotent retry); the
                    # lookup must also see rows this group has not flushed yet.
                    self._flush_fast(rows, marks)
                    request.result = value(self._stored_or_conflict(request, state))
                    continue
                records = plan(request, state, now, rows, marks)
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
        self._flush_fast(rows, marks)
        return changed

    def _flush_fast(self, rows: list[tuple[Any, ...]], marks: list[tuple[str, int]]) -> None:
        """Insert the planned record rows, then their checkpoint index rows."""
        if not rows:
            return
        try:
            self.conn.executemany(_INSERT, rows)
            if marks:
                self.conn.executemany(_INSERT_CHECKPOINT, marks)
        except Exception as exc:
            # A constraint (an id already stored, a lost race) or a row of one
            # request SQLite refuses: the slow path finds whose it is.
            raise _Retry from exc
        rows.clear()
        marks.clear()

    def _apply_slow(self, group: list[_Request]) -> tuple[dict[str, _State], set[str]]:
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
                if isinstance(request, _OpenRequest):
                    request.result = outcome.Value(self._open(request, work, now))
                else:
                    assert isinstance(request, _AppendRequest)
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
                    exc = _unavailable(exc, self.path, f"writing session {request.session!r:.80}")
                request.result = outcome.Error(exc)
            self.conn.execute("RELEASE request")
        return work, changed

    def _append_slow(
        self, request: _AppendRequest, state: _State, now: int
    ) -> tuple[list[Record], bool]:
        """Returns the records and whether they were inserted (not already stored)."""
        stored = self._stored(request)
        if stored is not None:
            return stored, False
        if request.expected_seq != state.head:
            raise ConflictError(request.session, request.expected_seq, state.head)
        rows: list[tuple[Any, ...]] = []
        marks: list[tuple[str, int]] = []
        records = self._plan(request, state, now, rows, marks)
        try:
            self.conn.executemany(_INSERT, rows)
            if marks:
                self.conn.executemany(_INSERT_CHECKPOINT, marks)
        except sqlite3.IntegrityError as exc:
            raise self._integrity(request, exc) from exc
        return records, bool(records)

    def _integrity(self, request: _AppendRequest, exc: sqlite3.IntegrityError) -> JournalError:
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
            return _unavailable(exc, self.path, f"writing session {request.session!r:.80}")
        row = self.conn.execute(
            "SELECT max(seq) FROM records WHERE session = ?", (request.session,)
        ).fetchone()
        self._cache.pop(request.session, None)
        return ConflictError(request.session, request.expected_seq, row[0] or 0)

    # -- the rules ---------------------------------------------------------------

    def _open(self, request: _OpenRequest, work: dict[str, _State], now: int) -> SessionLease:
        state = self._state(request.session, work)
        if state is None:
            if not request.create:
                raise SessionNotFoundError(request.session)
            self.conn.execute(
                "INSERT INTO sessions (session, incarnation, created_at) VALUES (?, 1, ?)",
                (request.session, now),
            )
            state = work[request.session] = _State(1, 0, GENESIS, now)
        else:
            state.incarnation += 1
            self.conn.execute(
                "UPDATE sessions SET incarnation = ? WHERE session = ?",
                (state.incarnation, request.session),
            )
        return SessionLease(session=request.session, incarnation=state.incarnation, head=state.head)

    def _checked_state(self, request: _AppendRequest, work: dict[str, _State]) -> _State:
        state = self._state(request.session, work)
        if state is None:
            raise SessionNotFoundError(request.session)
        if request.incarnation != state.incarnation:
            raise FencedError(request.session, request.incarnation, state.incarnation)
        return state

    def _plan(
        self,
        request: _AppendRequest,
        state: _State,
        now: int,
        rows: list[tuple[Any, ...]],
        marks: list[tuple[str, int]],
    ) -> list[Record]:
        """Assign seqs and digests, add the rows to ``rows`` and the checkpoint
        index rows to ``marks``, advance ``state``."""
        session = request.session
        seq, digest = state.head, state.digest
        records: list[Record] = []
        add_row, add_record, new_hash = rows.append, records.append, _new_hash
        for id, loop, cause, event, body in request.pending:
            seq += 1
            h = new_hash()
            h.update(digest)
            h.update(body)
            digest = h.digest()
            add_row((session, seq, id, loop, now, cause, digest, body))
            if isinstance(event, SessionCheckpoint):
                marks.append((session, seq))
            add_record(
                Record(
                    seq=seq,
                    id=id,
                    session=session,
                    loop=loop,
                    at=now,
                    cause=cause,
                    digest=digest,
                    event=event,
                )
            )
        state.head, state.digest = seq, digest
        return records

    def _stored_or_conflict(self, request: _AppendRequest, state: _State) -> list[Record]:
        stored = self._stored(request)
        if stored is None:
            raise ConflictError(request.session, request.expected_seq, state.head)
        return stored

    def _stored(self, request: _AppendRequest) -> list[Record] | None:
        """The stored records if every draft id is stored with identical content.

        ``None`` when no id is stored; ``DuplicateEventError`` when some are
        stored and some not, or one is stored with another loop or event.
        """
        if not request.pending:
            return None
        found: dict[str, tuple[Any, ...]] = {}
        ids = [p[0] for p in request.pending]
        for start in range(0, len(ids), _ID_CHUNK):
            chunk = ids[start : start + _ID_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for row in self.conn.execute(
                "SELECT id, seq, loop, at, cause, digest, body FROM records"
                f" WHERE session = ? AND id IN ({marks})",
                (request.session, *chunk),
            ):
                found[row[0]] = row
        if not found:
            return None
        records = []
        for id, p_loop, _, event, p_body in request.pending:
            row = found.get(id)
            if row is None:
                # Some of these drafts were stored and some were not: this is not
                # a retry of one append.  Name an id that is stored.
                raise DuplicateEventError(request.session, next(iter(found)))
            _, seq, loop, at, cause, digest, body = row
            if loop != p_loop or body != p_body:
                raise DuplicateEventError(request.session, id)
            records.append(
                Record(
                    seq=seq,
                    id=id,
                    session=request.session,
                    loop=loop,
                    at=at,
                    cause=cause,
                    digest=digest,
                    event=event,
                )
            )
        return records


# -- reading --------------------------------------------------------------------


class _Readers:
    """A pool of reader connections, each lent to one worker thread at a time."""

    def __init__(self, path: str, synchronous: str) -> None:
        self._path, self._synchronous = path, synchronous
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = _connect(self._path, self._synchronous)
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
        work: Callable[[], list[tuple[Any, ...]]],
        limit: int,
        token: trio.lowlevel.TrioToken,
    ) -> None:
        self.limit = limit
        self._done = trio.Event()
        self._result: outcome.Outcome[list[tuple[Any, ...]]] | None = None

        def deliver(result: outcome.Outcome[list[tuple[Any, ...]]]) -> None:
            self._result = result
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._done.set)

        trio.lowlevel.start_thread_soon(work, deliver, name="loopruntime-journal-reader")

    async def rows(self) -> list[tuple[Any, ...]]:
        await self._done.wait()
        assert self._result is not None
        return self._result.unwrap()


# -- the journal ------------------------------------------------------------------


def _refuse_abort(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


class SQLiteJournal:
    """A journal in one SQLite file.  Open it with ``open_journal("sqlite:///x.db")``.

    Bound to the trio run that opened it.  Several processes may open the same
    file: writes are serialised by SQLite's lock and fenced by incarnations,
    and each process's tails see the others' appends within ``poll`` seconds.
    """

    def __init__(self, url: str, options: _Options, writer_conn: sqlite3.Connection) -> None:
        self.url = url
        self.path = options.path
        self.synchronous = options.synchronous
        self.poll = options.poll
        self._closed = False
        self._changed: dict[str, trio.Event] = {}
        self._outbox: list[_Request] = []
        # Trio-thread bookkeeping for the flush policy in _submit.
        self._in_flight = 0
        self._last_group = 0
        self._readers = _Readers(options.path, options.synchronous)
        self._token = trio.lowlevel.current_trio_token()
        self._writer = _Writer(writer_conn, options.path, self._deliver, self._token)
        self._writer.thread.start()

    @classmethod
    async def open(cls, url: str) -> SQLiteJournal:
        """Open (or create, mode 0600) the journal file named by ``url``.

        Raises ``NotAJournalError`` for a file that is not a SQLite database or a
        database that is not a journal, ``JournalSchemaError`` for a journal
        written by a newer schema, ``ValueError`` for a malformed URL.
        """
        options = _parse_url(url)
        conn = await trio.to_thread.run_sync(_prepare, options.path, options.synchronous)
        return cls(url, options, conn)

    # -- writing --------------------------------------------------------------

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        """Take the writer lease of ``session``, fencing every older lease.

        Creates the session when ``create`` (else ``SessionNotFoundError``).
        Durable on return; once submitted it is not withdrawn by cancellation.
        """
        self._check_open()
        check_text("session id", session)
        result: SessionLease = await self._submit(_OpenRequest(session, create))
        return result

    async def append(
        self, lease: SessionLease, drafts: Sequence[Draft], *, expected_seq: int
    ) -> list[Record]:
        """Append ``drafts`` atomically after seq ``expected_seq``; see ``journal.store``.

        Returns once the records are committed (in one group transaction with
        whatever else was waiting).  Cancellation is honoured only before the
        request reaches the writer; after that the call returns its outcome and
        the cancellation takes effect at the caller's next checkpoint, so a
        committed append is never reported as cancelled.
        """
        self._check_open()
        # open_session refuses such an id, but a lease is plain data: a forged
        # or decoded one would fail, in the writer, the group it joined.
        check_text("session id", lease.session)
        if len(drafts) > 1:
            ids = [d.id for d in drafts]
            if len(set(ids)) != len(ids):
                repeated = next(i for i in ids if ids.count(i) > 1)
                raise DuplicateEventError(lease.session, repeated)
        check_drafts(drafts)
        encode = encode_checked
        pending = [(d.id, d.loop, d.cause, d.event, encode(d.event)) for d in drafts]
        result: list[Record] = await self._submit(_AppendRequest(lease, pending, expected_seq))
        return result

    async def _submit(self, request: _Request) -> Any:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._outbox.append(request)
        if len(self._outbox) == 1:
            if self._in_flight == 0 and self._last_group <= 1:
                # A lone writer (the last group was just one request and
                # nothing is in flight): send at once, for the lowest latency.
                self._flush_outbox()
            else:
                # Hand the outbox over once this scheduling round is over:
                # every task made runnable at the same moment (typically all
                # the appenders the last commit released) adds its request
                # first, so they share one transaction instead of the first
                # going alone and the rest one commit (one fsync) later.
                self._token.run_sync_soon(self._flush_outbox)
        # Not abortable: the writer always answers (aclose drains the queue
        # first), and a committed append must not be reported as cancelled.
        # Cancellation takes effect at the caller's next checkpoint.  _deliver
        # wakes this task with the writer's outcome, unwrapped here.
        return await trio.lowlevel.wait_task_rescheduled(_refuse_abort)

    def _flush_outbox(self) -> None:
        if self._outbox:
            group, self._outbox = self._outbox, []
            self._in_flight += len(group)
            self._writer.queue.put(group)

    def _deliver(self, group: list[_Request], changed: set[str]) -> None:
        """Runs on the trio thread: wake each waiting caller, then the tails."""
        self._in_flight -= len(group)
        self._last_group = len(group)
        reschedule = trio.lowlevel.reschedule
        for request in group:
            assert request.result is not None
            reschedule(request.task, request.result)
        for session in changed:
            event = self._changed.pop(session, None)
            if event is not None:
                event.set()

    # -- reading --------------------------------------------------------------

    def read(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """Yield the records after seq ``after`` in order, verifying the digest chain.

        A damaged record raises ``JournalCorruptError`` (with its seq) after
        every good record before it was yielded.  ``SessionNotFoundError`` if
        the session does not exist.  Sees what was committed when each batch was
        fetched.
        """
        self._check_open()
        return self._follow(session, after, follow=False)

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """``read``, then follow later appends until the journal is closed.

        Appends through this object wake it at once; appends by other processes
        are found by polling every ``poll`` seconds.
        """
        self._check_open()
        return self._follow(session, after, follow=True)

    async def _follow(self, session: str, after: int, *, follow: bool) -> AsyncIterator[Record]:
        # The digest of the record at ``after``: what the next record chains
        # from.  None until that record has been fetched.
        previous: bytes | None = GENESIS if after <= 0 else None
        after = max(after, 0)
        check = True
        decode = _decoder.decode
        new_hash = _new_hash
        while True:
            if self._closed:
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
                    rows = await fetch.rows()
                except JournalClosedError:
                    if follow:
                        return
                    raise
                if len(rows) == fetch.limit and not self._closed:
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
                    h.update(previous)
                    h.update(body)
                    if h.digest() != digest:
                        raise JournalCorruptError(session, seq, "digest chain broken")
                    try:
                        event: Event = decode(body)
                    except msgspec.DecodeError:
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
                if self._closed:
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
    ) -> list[tuple[Any, ...]]:
        """Worker thread: the rows after seq ``after`` (from ``after`` itself when
        ``with_previous``, to learn the digest the next row chains from)."""
        try:
            with self._readers.connection() as conn:
                if (
                    check
                    and not conn.execute(
                        "SELECT 1 FROM sessions WHERE session = ?", (session,)
                    ).fetchone()
                ):
                    raise SessionNotFoundError(session)
                if self._readers.closed:
                    raise JournalClosedError(f"journal {self.url} was closed during a read")
                start = after - 1 if with_previous else after
                return conn.execute(_SELECT_BATCH, (session, start, limit)).fetchall()
        except sqlite3.Error as exc:
            raise _unavailable(exc, self.path, f"reading session {session}") from exc

    async def head(self, session: str) -> int:
        """The session's last seq (0 if it has no records); ``SessionNotFoundError``."""
        self._check_open()
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
            raise _unavailable(exc, self.path, f"reading the head of session {session}") from exc
        if not exists:
            raise SessionNotFoundError(session)
        return int(head or 0)

    async def checkpoints(self, session: str) -> list[Record]:
        """The session's ``session.checkpoint`` records in seq order, from the index.

        Each is verified against the stored digest of the record before it: a
        damaged one is a ``JournalCorruptError`` with its seq.
        ``SessionNotFoundError`` if the session does not exist.  Sees what was
        committed when it was called; the caller owns the returned list.
        """
        self._check_open()
        return await trio.to_thread.run_sync(self._checkpoints, session)

    def _checkpoints(self, session: str) -> list[Record]:
        """Worker thread: one query, then verify and decode each checkpoint."""
        try:
            with self._readers.connection() as conn:
                if self._readers.closed:
                    raise JournalClosedError(f"journal {self.url} was closed during a read")
                if not conn.execute(
                    "SELECT 1 FROM sessions WHERE session = ?", (session,)
                ).fetchone():
                    raise SessionNotFoundError(session)
                rows = conn.execute(_SELECT_CHECKPOINTS, (session,)).fetchall()
        except sqlite3.Error as exc:
            raise _unavailable(
                exc, self.path, f"reading the checkpoints of session {session}"
            ) from exc
        return checkpoint_records(session, rows)

    async def sessions(self) -> list[SessionInfo]:
        """Every session, in creation order."""
        self._check_open()
        return await trio.to_thread.run_sync(self._sessions)

    def _sessions(self) -> list[SessionInfo]:
        try:
            with self._readers.connection() as conn:
                rows = conn.execute(
                    "SELECT s.session, s.incarnation, s.created_at, last.seq, last.at"
                    " FROM sessions AS s LEFT JOIN records AS last"
                    " ON last.session = s.session AND last.seq = ("
                    "  SELECT max(seq) FROM records WHERE session = s.session)"
                    " ORDER BY s.rowid"
                ).fetchall()
        except sqlite3.Error as exc:
            raise _unavailable(exc, self.path, "listing sessions") from exc
        return [
            SessionInfo(
                session=session,
                head=head or 0,
                incarnation=incarnation,
                created_at=created_at,
                updated_at=at if at is not None else created_at,
            )
            for session, incarnation, created_at, head, at in rows
        ]

    def statistics(self) -> SQLiteStatistics:
        """How many transactions the writer ran and how many writes they carried."""
        writer = self._writer
        return SQLiteStatistics(
            transactions=writer.transactions,
            requests=writer.requests,
            largest_group=writer.largest_group,
        )

    # -- lifecycle --------------------------------------------------------------

    async def aclose(self) -> None:
        """Finish every write already submitted, stop the writer, close connections.

        Tails end; later calls raise ``JournalClosedError``.  Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._flush_outbox()
        self._writer.queue.put(None)
        # Shielded: the writer must be joined (and its connection closed) even
        # when the closer is being cancelled, or the file stays locked.
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._writer.thread.join)
        self._readers.close()
        for event in self._changed.values():
            event.set()
        self._changed.clear()

    def corrupt_for_tests(self, session: str, seq: int, body: bytes) -> None:
        """Overwrite one stored event's bytes, leaving its digest (conformance suite only).

        Synchronous and blocking: it opens its own connection and commits.
        """
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute(
                "UPDATE records SET body = ? WHERE session = ? AND seq = ?", (body, session, seq)
            )
        finally:
            conn.close()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")
