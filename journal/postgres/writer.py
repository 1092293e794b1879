"""The PostgreSQL group commit: one writer connection, every waiting append in one transaction.

Rules: each batch locks its sessions' rows (``SELECT ... FOR UPDATE``, in
session order, so writers cannot deadlock) and is decided under that lock by
``journal.rules``; a failed check fails only its own append.  The fast path
(one statement, one round trip) writes at once when the writer knows each
session's state from its own last commit, inbox entries it applies
included, guarded so a stale guess or an entry already consumed fails the
statement and the batch is decided again on the checked path (two round
trips).  A batch cut off by a lost connection is retried once on a new one:
an append that had committed is found by its ids, never written twice.  The
story is in ``docs/journal.md``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import structlog
import trio

from ..errors import DuplicateEventError, JournalClosedError, JournalError, SessionNotFoundError
from ..record import Record
from ..rules import (
    Mark,
    Pending,
    Row,
    check_lease,
    decide_append,
    decide_consumes,
    plan_append,
    repeated_id,
)
from ..store import SessionLease
from .arrays import Array, ArrayDumper, bytea_array, int8_array, text_array
from .blobs import store as store_blobs
from .blobs import unique_blobs
from .schema import channel, connect, discard, lost, translate

__all__ = ["Append", "GroupCommit", "Writer"]

log = structlog.wrap_logger(logging.getLogger(__name__))

_WRITERS = 1
"""Group commits in flight at once, each on its own connection.  Measured
(benchmarks/postgres.py, 16 sessions, fsync on): with two, each leader takes
whatever waits while the other commits, batches halve and the commits
double; with one, batches hold every waiting appender (16 of 16) and the
server flushes as often as the raw batched peer.  Kept as a knob for
servers where commit latency, not flushes, is the limit."""

_GATHER_ROUNDS = 4
"""Scheduler rounds a group-commit leader waits for the last batch's appenders."""

# Arrays go in binary (%b): psycopg's text format escapes every element
# with a regular expression, which costs more than the rest of a small batch.
_LOCK_SESSIONS = """
SELECT session, incarnation, head, digest FROM loopruntime_sessions
WHERE session = ANY(%b::text[]) ORDER BY session FOR UPDATE
"""

_FIND_IDS = """
SELECT r.session, r.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body
FROM loopruntime_records r
JOIN unnest(%b::text[], %b::text[]) AS w(session, id) ON r.session = w.session AND r.id = w.id
"""

# One statement writes a batch: data-modifying CTEs always run to completion.
_WRITE = """
WITH inserted AS (
    INSERT INTO loopruntime_records (session, seq, id, loop, at, cause, digest, body)
    SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], %b::bigint[],
                         %b::text[], %b::bytea[], %b::bytea[])
), advanced AS (
    UPDATE loopruntime_sessions s SET head = u.head, digest = u.digest, updated_at = %b::bigint
    FROM unnest(%b::text[], %b::bigint[], %b::bytea[]) AS u(session, head, digest)
    WHERE s.session = u.session
), indexed AS (
    INSERT INTO loopruntime_checkpoints (session, seq)
    SELECT * FROM unnest(%b::text[], %b::bigint[])
)
SELECT pg_notify(c, '') FROM unnest(%b::text[]) AS c
"""

# The fast path: a whole batch from the states the writer last committed, as
# one statement, its own transaction.  It fails whole (the checked path then
# names the cause): the last line divides by zero unless every session still
# holds the known state (fencing, expected_seq) and every entry it applies was
# unconsumed, and a stored event id fails the unique index.  ``locked`` takes
# the session rows in order, like the checked path, and both updates join it,
# so no row is touched before its session's lock: writers cannot deadlock.
_WRITE_GUARDED = """
WITH locked AS MATERIALIZED (
    SELECT session FROM loopruntime_sessions
    WHERE session = ANY(%b::text[]) ORDER BY session FOR UPDATE
), advanced AS (
    UPDATE loopruntime_sessions s SET head = u.head, digest = u.digest, updated_at = %b::bigint
    FROM unnest(%b::text[], %b::bigint[], %b::bigint[], %b::bytea[], %b::bigint[], %b::bytea[])
        AS u(session, incarnation, old_head, old_digest, head, digest)
    JOIN locked l ON l.session = u.session
    WHERE s.session = u.session AND s.incarnation = u.incarnation
      AND s.head = u.old_head AND s.digest = u.old_digest
    RETURNING 1
), inserted AS (
    INSERT INTO loopruntime_records (session, seq, id, loop, at, cause, digest, body)
    SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], %b::bigint[],
                         %b::text[], %b::bytea[], %b::bytea[])
), indexed AS (
    INSERT INTO loopruntime_checkpoints (session, seq)
    SELECT * FROM unnest(%b::text[], %b::bigint[])
), stored_blobs AS (
    INSERT INTO loopruntime_blobs (digest, body) SELECT * FROM unnest(%b::bytea[], %b::bytea[])
    ON CONFLICT (digest) DO NOTHING
), consumed AS (
    UPDATE loopruntime_inbox i SET consumed_at = %b::bigint, outcome = u.outcome
    FROM unnest(%b::text[], %b::bigint[], %b::bytea[]) AS u(session, number, outcome)
    JOIN locked l ON l.session = u.session
    WHERE i.session = u.session AND i.number = u.number AND i.consumed_at IS NULL
    RETURNING 1
)
SELECT 1 / ((SELECT count(*) FROM advanced) = %b::bigint
            AND (SELECT count(*) FROM consumed) = %b::bigint)::int,
       (SELECT count(pg_notify(c, '')) FROM unnest(%b::text[]) AS c)
"""

# The inbox entries a batch applies, locked with their sessions' rows held.
_FIND_ENTRIES = """
SELECT i.session, i.number, i.consumed_at IS NOT NULL, i.outcome FROM loopruntime_inbox i
JOIN unnest(%s::text[], %s::bigint[]) AS w(session, number)
  ON i.session = w.session AND i.number = w.number
FOR UPDATE OF i
"""

_CONSUME = """
UPDATE loopruntime_inbox i SET consumed_at = %s, outcome = u.outcome
FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) AS u(session, number, outcome)
WHERE i.session = u.session AND i.number = u.number
"""


def _writer_connection(url: str) -> psycopg.Connection[Any]:
    """Blocking: a connection for the writer, which sends ``Array`` parameters."""
    conn = connect(url)
    conn.adapters.register_dumper(Array, ArrayDumper)
    return conn


class Append:
    """One append waiting for the group commit."""

    __slots__ = ("blobs", "consumes", "expected_seq", "lease", "pending", "result", "taken")

    def __init__(
        self,
        lease: SessionLease,
        pending: list[Pending],
        expected_seq: int,
        consumes: list[tuple[int, bytes]] | None = None,
        blobs: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.lease, self.pending, self.expected_seq = lease, pending, expected_seq
        self.consumes, self.blobs = consumes, blobs
        """Inbox entries it applies (number, outcome); its records' blobs."""
        self.result: list[Record] | BaseException | None = None
        self.taken = False
        """A leader took it into a batch: its outcome is no longer ours to drop."""


class _Head:
    """A session's locked state while a batch is being checked."""

    __slots__ = ("digest", "head", "incarnation", "written")

    def __init__(self, incarnation: int, head: int, digest: bytes) -> None:
        self.incarnation, self.head, self.digest = incarnation, head, digest
        self.written = False


class _FastPlan:
    """The fast path's guess for a batch: each append's records, all their rows,
    and the inbox entries the batch applies."""

    __slots__ = ("consumes", "marks", "now", "records", "rows")

    def __init__(self, now: int) -> None:
        self.now = now
        self.records: list[list[Record]] = []
        self.rows: list[Row] = []
        self.marks: list[Mark] = []
        self.consumes: list[tuple[str, int, bytes]] = []
        """``(session, number, outcome)`` of every entry applied."""


_Known = tuple[int, int, bytes]
"""A session's incarnation, head and head digest as a writer of this journal
last committed them: a guess that the fast path checks, never trusted."""


class Writer:
    """The group-commit writer: one connection, used by one thread at a time."""

    def __init__(self, url: str, where: str, schema: str, known: dict[str, _Known]) -> None:
        self._url, self._where, self._schema = url, where, schema
        self._conn: psycopg.Connection[Any] | None = None
        self._known = known

    def commit(self, batch: list[Append]) -> None:
        """Blocking: commit ``batch``, setting every item's ``result``.

        A lost connection is retried once on a new one (safe: see the module
        docstring).  Any other error, the server's or this process's, makes
        each append run in a transaction of its own, so it fails only the
        append that caused it.
        """
        for attempt in (1, 2):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = _writer_connection(self._url)
                results = self._commit_once(self._conn, batch)
            except psycopg.Error as exc:
                if not lost(self._conn):
                    # The server refused a statement; find the append that
                    # caused it by committing each alone.
                    self._rollback()
                    if len(batch) > 1:
                        for item in batch:
                            self.commit([item])
                    else:
                        batch[0].result = translate(self._where, "append", exc, lost=False)
                    return
                discard(self._conn)
                self._conn = None
                if attempt == 2:
                    err = translate(
                        self._where,
                        "append",
                        exc,
                        lost=True,
                        hint="; the append's outcome is unknown: append the same drafts "
                        "(same event ids) again once the server is reachable -- if it had "
                        "committed, its records are returned and nothing is written twice",
                    )
                    for item in batch:
                        item.result = err
                    return
                log.warning("postgres_append_retry", where=self._where, error=str(exc))
            except Exception as exc:
                # Raised here, not by the server (a parameter that cannot be
                # encoded, memory): statements queued before it may have run,
                # leaving a transaction open that the next batch's COMMIT
                # would commit.  Closing the connection rolls it back.
                discard(self._conn)
                self._conn = None
                if len(batch) > 1:
                    for item in batch:
                        self.commit([item])
                else:
                    batch[0].result = exc
                return
            else:
                for item, result in zip(batch, results, strict=True):
                    item.result = result
                return

    def _rollback(self) -> None:
        try:
            if self._conn is not None:
                self._conn.rollback()
        except psycopg.Error:
            discard(self._conn)
            self._conn = None

    def close(self) -> None:
        discard(self._conn)
        self._conn = None

    def _commit_once(
        self, conn: psycopg.Connection[Any], batch: list[Append]
    ) -> list[list[Record] | BaseException]:
        """Commit ``batch``: on the fast path when it applies and succeeds, else checked."""
        planned = self._plan_fast(batch)
        if planned is not None and self._commit_fast(conn, batch, planned):
            return [*planned.records]
        return self._commit_checked(conn, batch)

    def _plan_fast(self, batch: list[Append]) -> _FastPlan | None:
        """Records for every append of ``batch`` from the known states, or None.

        None when the fast path does not apply: a session not known (or known
        at another head), a session appended twice in the batch, one id or
        one inbox entry twice in an append.  The plan is a guess until
        ``_commit_fast`` confirms it.
        """
        sessions = [item.lease.session for item in batch]
        if len(set(sessions)) != len(sessions):
            return None
        plan = _FastPlan(time.time_ns())
        for item in batch:
            session = item.lease.session
            known = self._known.get(session)
            if known is None or known[0] != item.lease.incarnation or known[1] != item.expected_seq:
                return None
            if repeated_id([p[0] for p in item.pending]) is not None:
                return None
            consumes = item.consumes or ()
            if len({number for number, _ in consumes}) != len(consumes):
                return None  # one entry twice: the checked path refuses the append
            plan.consumes += [(session, number, outcome) for number, outcome in consumes]
            plan.records.append(
                plan_append(
                    session, known[1], known[2], item.pending, plan.now, plan.rows, plan.marks
                )
            )
        return plan

    def _commit_fast(
        self, conn: psycopg.Connection[Any], batch: list[Append], planned: _FastPlan
    ) -> bool:
        """Write the planned appends in one statement: all of them, or (False) none.

        False when a session no longer holds its known state, an inbox entry
        is no longer unconsumed, or an event id is already stored (or the
        server refused the statement); those sessions are then forgotten, and
        the checked path that decides the batch learns their state again.
        """
        now, plans, rows, marks = planned.now, planned.records, planned.rows, planned.marks
        sessions = [item.lease.session for item in batch]
        known = [self._known[s] for s in sessions]
        # An append may have no drafts: its session keeps its head and digest.
        after = [
            (k[0], records[-1].seq, records[-1].digest) if records else k
            for k, records in zip(known, plans, strict=True)
        ]
        encoding = conn.info.encoding
        consumes = planned.consumes
        digests, bodies = unique_blobs(batch)
        # Every parameter is encoded before anything is sent, so an encoding
        # failure sends nothing.
        params = (
            text_array(sessions, encoding),
            now,
            text_array(sessions, encoding),
            int8_array([k[0] for k in known]),
            int8_array([k[1] for k in known]),
            bytea_array([k[2] for k in known]),
            int8_array([a[1] for a in after]),
            bytea_array([a[2] for a in after]),
            text_array([r[0] for r in rows], encoding),
            int8_array([r[1] for r in rows]),
            text_array([r[2] for r in rows], encoding),
            text_array([r[3] for r in rows], encoding),
            int8_array([r[4] for r in rows]),
            text_array([r[5] for r in rows], encoding),
            bytea_array([r[6] for r in rows]),
            bytea_array([r[7] for r in rows]),
            text_array([m[0] for m in marks], encoding),
            int8_array([m[1] for m in marks]),
            bytea_array(digests),
            bytea_array(bodies),
            now,
            text_array([c[0] for c in consumes], encoding),
            int8_array([c[1] for c in consumes]),
            bytea_array([c[2] for c in consumes]),
            len(sessions),
            len(consumes),
            text_array([channel(self._schema, s) for s in sessions], encoding),
        )
        try:
            conn.execute(_WRITE_GUARDED, params)
        except psycopg.Error:
            if lost(conn):
                raise
            # A guard failed or an id is stored (or the server refused the
            # statement, which the checked path will report): the statement
            # was its own transaction, so nothing was written.
            for session in sessions:
                self._known.pop(session, None)
            return False
        for session, state in zip(sessions, after, strict=True):
            self._known[session] = state
        return True

    def _commit_checked(
        self, conn: psycopg.Connection[Any], batch: list[Append]
    ) -> list[list[Record] | BaseException]:
        """Lock, look up, check each append, write those that pass: two round trips."""
        sessions = sorted({item.lease.session for item in batch})
        want_sessions = [item.lease.session for item in batch for _ in item.pending]
        want_ids = [p[0] for item in batch for p in item.pending]
        wanted = [(item.lease.session, c[0]) for item in batch for c in item.consumes or ()]
        with conn.pipeline():
            conn.execute("BEGIN")
            locked = conn.execute(_LOCK_SESSIONS, (sessions,))
            found = conn.execute(_FIND_IDS, (want_sessions, want_ids))
            # Sent before any result is read: it runs after the lock, in the same round trip.
            entry_keys = ([w[0] for w in wanted], [w[1] for w in wanted])
            locking = conn.execute(_FIND_ENTRIES, entry_keys) if wanted else None
            heads = {s: _Head(inc, head, digest) for s, inc, head, digest in locked.fetchall()}
            stored: dict[tuple[str, str], Row] = {(r[0], r[2]): r for r in found.fetchall()}
            entries: dict[tuple[str, int], tuple[bool, bytes | None]] = {}
            if locking is not None:
                for session, number, consumed, outcome in locking.fetchall():
                    entries[(session, number)] = (consumed, outcome)
            now = time.time_ns()
            rows: list[Row] = []
            marks: list[Mark] = []
            applied: list[tuple[str, int, bytes]] = []
            results = [
                self._check(item, heads, stored, entries, rows, marks, applied, now)
                for item in batch
            ]
            written = {s: h for s, h in heads.items() if h.written}
            if written:
                columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * 8
                conn.execute(
                    _WRITE,
                    (
                        *columns,
                        now,
                        list(written),
                        [h.head for h in written.values()],
                        [h.digest for h in written.values()],
                        [m[0] for m in marks],
                        [m[1] for m in marks],
                        [channel(self._schema, s) for s in written],
                    ),
                )
            if applied:
                sessions_, numbers, outcomes = (list(c) for c in zip(*applied, strict=True))
                conn.execute(_CONSUME, (now, sessions_, numbers, outcomes))
            store_blobs(conn, batch, results)
            conn.execute("COMMIT")
        for s, h in heads.items():
            self._known[s] = (h.incarnation, h.head, h.digest)
        return results

    def _check(
        self,
        item: Append,
        heads: dict[str, _Head],
        stored: dict[tuple[str, str], Row],
        entries: dict[tuple[str, int], tuple[bool, bytes | None]],
        rows: list[Row],
        marks: list[Mark],
        applied: list[tuple[str, int, bytes]],
        now: int,
    ) -> list[Record] | BaseException:
        """Decide one append against the locked state; queue its rows when it passes.

        The seqs of its ``session.checkpoint`` records go to ``marks``, for the index.
        """
        session, pending = item.lease.session, item.pending
        h = heads.get(session)
        try:
            if h is None:
                raise SessionNotFoundError(session)
            check_lease(session, item.lease.incarnation, h.incarnation)
            # Before the stored ids: one id twice is never a retry of an append,
            # even when that id is stored (no such append can have committed).
            repeated = repeated_id([p[0] for p in pending])
            if repeated is not None:
                raise DuplicateEventError(session, repeated)
            hits = [stored.get((session, p[0])) for p in pending]
            start, marked = len(rows), len(marks)
            records, fresh = decide_append(
                session, item.expected_seq, h.head, h.digest, pending, hits, now, rows, marks
            )
            if item.consumes:
                try:
                    found = [entries.get((session, n)) for n, _ in item.consumes]
                    consumed = decide_consumes(session, item.consumes, found)
                except JournalError:
                    # Refused whole: the records it planned are not written.
                    del rows[start:], marks[marked:]
                    raise
                for number, outcome in consumed:
                    entries[(session, number)] = (True, outcome)
                    applied.append((session, number, outcome))
        except JournalError as exc:
            return exc
        if fresh:
            for row in rows[start:]:
                # A later append of this batch re-sending these ids finds them here.
                stored[(session, row[2])] = row
            if records:
                h.head, h.digest = records[-1].seq, records[-1].digest
            h.written = True
        return records


class GroupCommit:
    """The leader protocol of the group commit, on the trio thread.

    An append waits in ``pending``; when a writer is idle, the waiting task
    that finds it leads: it takes every append waiting then, its own
    included, and commits them in one transaction in a worker thread.  The
    others wait for that batch's outcome.
    """

    def __init__(self, url: str, where: str, schema: str) -> None:
        self._where = where
        known: dict[str, _Known] = {}
        self._idle_writers = [Writer(url, where, schema, known) for _ in range(_WRITERS)]
        self._pending: list[Append] = []
        self._written = trio.Event()
        self._last_batch = 1
        self.closed = False
        """Set by the journal as it starts closing: no batch is led after it."""

    async def submit(self, item: Append) -> list[Record]:
        """Commit ``item`` in the next batch and return its records (or raise its error).

        Atomic under cancellation: cancelled before the batch carrying it is
        sent, it raises ``Cancelled`` and nothing is written; once sent, it
        waits for the batch's outcome and reports it.
        """
        self._pending.append(item)
        try:
            while item.result is None:
                if not self._idle_writers:
                    if item.taken:
                        # Sent in another task's batch: wait for its outcome
                        # even if cancelled, so a cancelled append never
                        # leaves the caller unsure whether it was written.
                        with trio.CancelScope(shield=True):
                            await self._written.wait()
                    else:
                        await self._written.wait()
                    continue
                self._check_open()
                # This task leads the next group commit: it takes every append
                # waiting now, its own included.
                writer = self._idle_writers.pop()
                batch: list[Append] = []
                try:
                    await self._gather()
                    batch, self._pending = self._pending, []
                    for taken in batch:
                        taken.taken = True
                    if batch:
                        # Not abandoned on cancel: the outcome must be recorded.
                        await trio.to_thread.run_sync(writer.commit, batch)
                finally:
                    for taken in batch:
                        if taken.result is None:
                            # Only an error escaping the writer gets here; without
                            # a result the appends would wait for ever.
                            taken.result = JournalError(
                                f"journal {self._where}: the group commit stopped before "
                                "deciding this append; its outcome is unknown: append the "
                                "same drafts again to learn it"
                            )
                    if batch:
                        self._last_batch = len(batch)
                    self._idle_writers.append(writer)
                    written, self._written = self._written, trio.Event()
                    written.set()
        finally:
            if item.result is None and item in self._pending:
                self._pending.remove(item)
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result

    async def _gather(self) -> None:
        """Give the appenders the last commit released a moment to append again.

        When a commit returns, its leader runs first and would commit its
        next append alone while the others are still waking up: the batches
        would alternate one / the rest.  So while fewer appends wait than the
        last batch held, the leader lets the other runnable tasks run, for at
        most a few scheduler rounds (microseconds, no timer).  A lone
        appender never waits here.
        """
        for _ in range(_GATHER_ROUNDS):
            if len(self._pending) >= self._last_batch:
                return
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def aclose(self) -> None:
        """Wait for the commit in flight (if any) to be decided, then close the writers.

        Call after setting ``closed``: appends still waiting then fail with
        ``JournalClosedError``.  Shielded: a commit decides its appends' outcomes.
        """
        with trio.CancelScope(shield=True):
            while len(self._idle_writers) < _WRITERS:
                await self._written.wait()
            self._written.set()
            for writer in self._idle_writers:
                await trio.to_thread.run_sync(writer.close)

    def _check_open(self) -> None:
        if self.closed:
            raise JournalClosedError(f"journal {self._where} is closed")
