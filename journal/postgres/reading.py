"""Reading a PostgreSQL journal: the connection pool, paged reads, LISTEN/NOTIFY tails.

Rules: no connection or transaction is held while a consumer works (each
page is its own query, the next one fetched while this one is verified);
every read verifies the digest chain; a ``tail`` holds its own listening
connection and wakes on commit notifications, never on a timer.  psycopg's
blocking calls run in trio worker threads, one connection per thread at a
time.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any, TypeVar

import msgspec
import psycopg
import trio
from psycopg import sql

from ..blobs import is_split, join, references
from ..codec import GENESIS, decode_event
from ..errors import JournalClosedError, JournalCorruptError, SessionNotFoundError
from ..events import Event
from ..record import Record
from ..store import Checkpointed, SessionInfo, StorageCheck, StorageProblem, WriterSpan
from .blobs import fetch as fetch_blobs
from .checkpoints import checkpointed, checkpoints
from .retrying import Attempts
from .schema import channel, connect, discard, lost, translate
from .writers import list_writers

__all__ = ["Pool", "Reading", "first_page", "list_sessions"]

_T = TypeVar("_T")

_decoder = msgspec.msgpack.Decoder(Event)
"""This module's own decoder, for the read loop (see ``Reading.read``)."""
_pack = msgspec.msgpack.Encoder().encode
_new_hash = hashlib.blake2b(digest_size=16).copy

_POOL_SIZE = 4
"""Connections for reads, heads and leases (the writer has its own)."""

_READ_PAGE = 5000
"""Records fetched per round trip when reading: big enough that the round
trip is noise, small enough that a page of large events stays modest."""

# A seq range rather than ``seq > n LIMIT k``: seqs are gap-free, so the range
# is the page, and the server reads only those rows even when its statistics
# are stale (a young journal's always are) and it picks a bitmap scan + sort.
_PAGE = """
SELECT seq, id, loop, at, cause, digest, body FROM loopruntime_records
WHERE session = %s AND seq > %s AND seq <= %s ORDER BY seq
"""

# A session row must agree with its last record: the writer updates both in
# one transaction.  One index probe per session.
_SESSION_ROWS_ASTRAY = """
SELECT s.session, s.head, s.digest, last.seq, last.digest
FROM loopruntime_sessions s
LEFT JOIN LATERAL (
    SELECT seq, digest FROM loopruntime_records r
    WHERE r.session = s.session ORDER BY seq DESC LIMIT 1
) last ON true
WHERE s.head IS DISTINCT FROM coalesce(last.seq, 0)
   OR (last.seq IS NOT NULL AND s.digest IS DISTINCT FROM last.digest)
ORDER BY s.session
LIMIT 20
"""

_JOURNAL_TABLES = (
    "loopruntime_meta",
    "loopruntime_sessions",
    "loopruntime_records",
    "loopruntime_checkpoints",
    "loopruntime_chain_rule",
    "loopruntime_blobs",
    "loopruntime_writers",
    "loopruntime_leases",
    "loopruntime_inbox",
)


class Pool:
    """Autocommit connections for everything but appends, lent to one thread at a time."""

    def __init__(self, url: str, where: str) -> None:
        self._url, self._where = url, where
        self._idle: list[psycopg.Connection[Any]] = []
        self._limit = trio.Semaphore(_POOL_SIZE)
        self.closed = False

    def give(self, conn: psycopg.Connection[Any]) -> None:
        self._idle.append(conn)

    async def run(
        self, doing: str, fn: Callable[[psycopg.Connection[Any]], _T], *, retry: bool = True
    ) -> _T:
        """Run blocking ``fn(conn)`` in a worker thread on a pooled connection.

        A connection that fails is thrown away; with ``retry`` (for work that
        is safe to repeat) ``fn`` runs again as ``retrying.Attempts`` says.
        """
        attempts = Attempts(self._where, doing, retry=retry)
        async with self._limit:
            while True:
                if self.closed:
                    raise JournalClosedError(f"journal {self._where} is closed")
                conn = self._idle.pop() if self._idle else None
                try:
                    if conn is None:
                        conn = await trio.to_thread.run_sync(connect, self._url)
                    result = await trio.to_thread.run_sync(fn, conn)
                except psycopg.Error as exc:
                    broken = lost(conn)
                    if broken:
                        # Shielded: closing is quick and must happen even when
                        # the caller is being cancelled, or the connection leaks.
                        with trio.CancelScope(shield=True):
                            await trio.to_thread.run_sync(discard, conn)
                    else:
                        self._return(conn)
                    await trio.sleep(attempts.failed(exc, broken=broken))
                    continue
                except BaseException:
                    self._return(conn)
                    raise
                self._return(conn)
                return result

    def _return(self, conn: psycopg.Connection[Any] | None) -> None:
        if conn is None:
            return
        if self.closed or conn.closed:
            discard(conn)
        else:
            self._idle.append(conn)

    def close(self) -> None:
        """Blocking: close the idle connections; busy ones close when returned."""
        self.closed = True
        while self._idle:
            discard(self._idle.pop())


class _Ahead:
    """A page fetched by a system task while the reader works through the previous one.

    A system task rather than a child task because a read is an async
    generator, which must not own a nursery.  The fetch is one short query;
    it returns its connection to the pool whether or not the page is ever
    collected (the reader may stop early).
    """

    def __init__(
        self, pool: Pool, doing: str, fetch: Callable[[psycopg.Connection[Any]], list[Any]]
    ) -> None:
        self._done = trio.Event()
        self._rows: list[Any] = []
        self._error: Exception | None = None
        trio.lowlevel.spawn_system_task(self._fetch, pool, doing, fetch)

    async def _fetch(
        self, pool: Pool, doing: str, fetch: Callable[[psycopg.Connection[Any]], list[Any]]
    ) -> None:
        try:
            self._rows = await pool.run(doing, fetch)
        except Exception as exc:
            # Handed to the reader, which raises it; a system task must not raise.
            self._error = exc
        finally:
            self._done.set()

    async def page(self) -> list[Any]:
        """The rows, once fetched; the fetch's error when it failed."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._rows


class Reading:
    """Everything a ``PostgresJournal`` reads with: the pool and the tails' waits."""

    def __init__(self, url: str, where: str, schema: str, pool: Pool) -> None:
        self.url = url
        self._where, self._schema, self._pool = where, schema, pool
        self._tail_waits: set[trio.CancelScope] = set()
        self.closed = False
        """Set by the journal as it starts closing: reads stop paging, tails end."""

    def _check_open(self) -> None:
        if self.closed:
            raise JournalClosedError(f"journal {self._where} is closed")

    def end_tails(self) -> None:
        """Wake every tail waiting for a notification; they see ``closed`` and end."""
        for scope in self._tail_waits:
            scope.cancel()

    async def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        """Yield the session's records after seq ``after``, verifying the chain.

        A damaged record raises ``JournalCorruptError`` after every good
        record before it was yielded.  Each page is its own query, so no
        connection or transaction is held while the consumer works.
        """
        self._check_open()

        doing = f"reading session {session}"
        first = await self._pool.run(doing, partial(first_page, session=session, after=after))
        if first is None:
            raise SessionNotFoundError(session)
        previous, whole_from, page = first
        seq = after
        decode, new_hash, pack = _decoder.decode, _new_hash, _pack
        while page:
            # A full page may have more behind it: fetch that while this one is
            # verified and decoded, so the round trip costs no time here.
            ahead = None
            if len(page) == _READ_PAGE and not self.closed:
                ahead = _Ahead(
                    self._pool, doing, partial(_page, session=session, after=seq + _READ_PAGE)
                )
            for count, (row_seq, id_, loop, at, cause, digest, body) in enumerate(page, 1):
                seq += 1
                if row_seq != seq:
                    raise JournalCorruptError(session, seq, f"record missing (found {row_seq})")
                # codec.chain and codec.decode_event, inlined: on this path the
                # two calls cost as much as the Record; failures still go
                # through decode_event, which explains them.
                h = new_hash()
                if seq >= whole_from:
                    h.update(pack((previous, seq, id_, session, loop, at, cause)))
                else:
                    h.update(previous)  # the body-only rule of schema 2
                h.update(body)
                if h.digest() != digest:
                    raise JournalCorruptError(session, seq, "digest chain broken")
                previous = digest
                if loop == skip_stream:
                    continue
                try:
                    event: Event = decode(body)
                except msgspec.DecodeError:
                    if is_split(body):
                        # Stored with references: the one moment blobs are read.
                        found = await self._pool.run(
                            f"reading the blobs of session {session}",
                            partial(fetch_blobs, digests=references(body)),
                        )
                        body = join(session, seq, body, found)
                    event = decode_event(body, session=session, seq=seq)
                yield Record(
                    seq=seq,
                    id=id_,
                    session=session,
                    loop=loop,
                    at=at,
                    cause=cause,
                    digest=digest,
                    event=event,
                )
                if count % 512 == 0:
                    await trio.lowlevel.checkpoint()
            if ahead is None:
                return
            page = await ahead.page()

    async def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """``read``, then follow appends (from any process) until the journal closes.

        Holds one listening connection while it runs; wakes on commit
        notifications, never on a timer.
        """
        self._check_open()
        name = channel(self._schema, session)
        listener = await self._listen(name)
        try:
            seq = after
            while not self.closed:
                try:
                    async for record in self.read(session, after=seq):
                        seq = record.seq
                        yield record
                except JournalClosedError:
                    # Closed while the consumer held a record: the tail just ends.
                    return
                if await self._wait_notified(listener):
                    return
                if not _drain(listener):
                    # Lost the listening connection: listen again, then re-read,
                    # which catches anything committed while it was down.
                    _close_listener(listener)
                    listener = await self._listen(name)
        finally:
            _close_listener(listener)

    async def notifications(self, name: str) -> AsyncIterator[str]:
        """The payload of each notification on channel ``name``, until the
        journal closes; ``""`` first, once it listens, and after a lost
        listening connection is made again (some may have been missed)."""
        self._check_open()
        listener = await self._listen(name)
        try:
            yield ""
            while not await self._wait_notified(listener):
                payloads = _payloads(listener)
                if payloads is None:
                    _close_listener(listener)
                    listener = await self._listen(name)
                    payloads = [""]
                for payload in payloads:
                    yield payload
        finally:
            _close_listener(listener)

    async def _listen(self, name: str) -> psycopg.Connection[Any]:
        def work() -> psycopg.Connection[Any]:
            conn = connect(self.url)
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            except BaseException:
                discard(conn)
                raise
            return conn

        try:
            return await trio.to_thread.run_sync(work)
        except psycopg.Error as exc:
            raise translate(self._where, "following a session", exc, lost=True) from exc

    async def _wait_notified(self, listener: psycopg.Connection[Any]) -> bool:
        """Wait until the listening socket is readable; True when the journal closed."""
        if self.closed:
            return True
        with trio.CancelScope() as scope:
            self._tail_waits.add(scope)
            try:
                await trio.lowlevel.wait_readable(listener.fileno())
            finally:
                self._tail_waits.discard(scope)
        return self.closed

    async def head(self, session: str) -> int:

        def work(conn: psycopg.Connection[Any]) -> int | None:
            row = conn.execute(
                "SELECT head FROM loopruntime_sessions WHERE session = %s", (session,)
            ).fetchone()
            return int(row[0]) if row else None

        got = await self._pool.run(f"reading the head of session {session}", work)
        if got is None:
            raise SessionNotFoundError(session)
        return got

    async def checkpoints(self, session: str) -> list[Record]:
        """The session's ``session.checkpoint`` records, in seq order, from the
        index (``checkpoints.checkpoints``)."""
        found = await self._pool.run(
            f"reading the checkpoints of session {session}", partial(checkpoints, session=session)
        )
        if found is None:
            raise SessionNotFoundError(session)
        return found

    async def read_checkpointed(self, session: str, tail_limit: int) -> Checkpointed:
        """``checkpoints`` and the records after the last one, in one
        statement (``checkpoints.checkpointed``)."""
        got = await self._pool.run(
            f"reading the checkpoints of session {session}",
            partial(checkpointed, session=session, tail_limit=tail_limit),
        )
        if got is None:
            raise SessionNotFoundError(session)
        return got

    async def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        return await self._pool.run("listing sessions", list_sessions)

    async def writers(self, session: str) -> list[WriterSpan]:
        """Who appended the session's records, in seq order (one query)."""
        got = await self._pool.run(
            f"reading the writers of session {session}", lambda conn: list_writers(conn, session)
        )
        if got is None:
            raise SessionNotFoundError(session)
        return got

    async def check_storage(self) -> StorageCheck:
        """Every session row against its last record, and amcheck's heap and
        B-tree checks of the journal's tables when the extension is installed."""

        def work(conn: psycopg.Connection[Any]) -> StorageCheck:
            checked = ["session rows agree with their last records"]
            problems = [
                StorageProblem(
                    table="loopruntime_sessions",
                    detail=f"session {session} has head {head} and digest {digest.hex()}, "
                    f"but its last record is seq {seq or 0}"
                    + (f" with digest {last.hex()}" if last is not None else ""),
                )
                for session, head, digest, seq, last in conn.execute(
                    _SESSION_ROWS_ASTRAY
                ).fetchall()
            ]
            row = conn.execute(
                "SELECT n.nspname FROM pg_extension e"
                " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'amcheck'"
            ).fetchone()
            if row is None:
                return StorageCheck(
                    checked=tuple(checked),
                    skipped=(
                        "heap and index pages: the amcheck extension is not installed in "
                        "this database (CREATE EXTENSION amcheck enables the check)",
                    ),
                    problems=tuple(problems),
                )
            problems += _amcheck(conn, str(row[0]))
            checked.append("amcheck verify_heapam and bt_index_check of every journal table")
            return StorageCheck(checked=tuple(checked), problems=tuple(problems))

        return await self._pool.run("checking the journal's tables", work)


def _amcheck(conn: psycopg.Connection[Any], extension_schema: str) -> list[StorageProblem]:
    """Blocking: amcheck's checks of each journal table and its B-tree indexes.

    Read-only, taking only the locks a plain read takes.  An index check
    raises on the first damage it finds: that is the index's one problem."""
    problems: list[StorageProblem] = []
    heap = sql.SQL("SELECT blkno, offnum, msg FROM {}.verify_heapam(%s::regclass) LIMIT 5").format(
        sql.Identifier(extension_schema)
    )
    btree = sql.SQL("SELECT {}.bt_index_check(%s::regclass, true)").format(
        sql.Identifier(extension_schema)
    )
    for table in _JOURNAL_TABLES:
        found = conn.execute(heap, (table,)).fetchall()
        if found:
            problems.append(
                StorageProblem(
                    table=table,
                    detail="; ".join(f"block {b} item {o}: {m}" for b, o, m in found),
                )
            )
        indexes = conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index"
            " JOIN pg_class c ON c.oid = indexrelid"
            " JOIN pg_am a ON a.oid = c.relam"
            " WHERE indrelid = %s::regclass AND a.amname = 'btree'",
            (table,),
        ).fetchall()
        for (index,) in indexes:
            try:
                conn.execute(btree, (index,))
            except (psycopg.errors.IndexCorrupted, psycopg.errors.DataCorrupted) as exc:
                problems.append(StorageProblem(table=table, detail=f"index {index}: {exc}"))
    return problems


def first_page(
    conn: psycopg.Connection[Any], session: str, after: int
) -> tuple[bytes, int, list[tuple[Any, ...]]] | None:
    """Blocking: the digest of the record at ``after`` (what the next one chains
    from), the first seq chained over the whole record, and the first page
    after ``after``; None when the session does not exist."""
    row = conn.execute(
        "SELECT (SELECT digest FROM loopruntime_records WHERE session = %s AND seq = %s),"
        " (SELECT whole_from FROM loopruntime_chain_rule WHERE session = %s)"
        " FROM loopruntime_sessions WHERE session = %s",
        (session, after, session, session),
    ).fetchone()
    if row is None:
        return None
    return row[0] or GENESIS, row[1] or 1, _page(conn, session, after)


def list_sessions(conn: psycopg.Connection[Any]) -> list[SessionInfo]:
    """Blocking: every session, oldest first."""
    rows = conn.execute(
        "SELECT s.session, s.head, s.incarnation, s.created_at, s.updated_at,"
        " l.owner, coalesce(l.expires_at, 0), l.definition,"
        " (SELECT count(*) FROM loopruntime_inbox i"
        "  WHERE i.session = s.session AND i.consumed_at IS NULL),"
        # Judged by the server's clock, as every lease is.
        " l.owner IS NOT NULL AND l.expires_at >"
        " (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint"
        " FROM loopruntime_sessions s"
        " LEFT JOIN loopruntime_leases l ON l.session = s.session"
        " ORDER BY s.created_at, s.session"
    ).fetchall()
    return [
        SessionInfo(
            session=s,
            head=h,
            incarnation=i,
            created_at=c,
            updated_at=u,
            owner=o,
            expires_at=e,
            definition=d,
            pending=p,
            live=bool(v),
        )
        for s, h, i, c, u, o, e, d, p, v in rows
    ]


def _page(conn: psycopg.Connection[Any], session: str, after: int) -> list[tuple[Any, ...]]:
    """Blocking: the next page of records after ``after``."""
    # Binary results: bytea arrives as raw bytes instead of hex to decode.
    with conn.cursor(binary=True) as cur:
        return cur.execute(_PAGE, (session, after, after + _READ_PAGE)).fetchall()


def _close_listener(listener: psycopg.Connection[Any]) -> None:
    """Close a listening connection, telling trio first that its socket goes away.

    PQfinish only writes a short terminate message and closes the socket, so
    this runs on the trio thread, even while a tail is being cancelled.
    """
    if not listener.closed:
        trio.lowlevel.notify_closing(listener.fileno())
    discard(listener)


def _payloads(listener: psycopg.Connection[Any]) -> list[str] | None:
    """The payloads of the notifications the listening socket holds; None
    when the connection is lost.  Never blocks."""
    pgconn = listener.pgconn
    try:
        pgconn.consume_input()
    except psycopg.OperationalError:
        return None
    found: list[str] = []
    while (notice := pgconn.notifies()) is not None:
        found.append(notice.extra.decode(errors="replace"))
    return found


def _drain(listener: psycopg.Connection[Any]) -> bool:
    """Consume what the listening socket holds; False when the connection is lost.

    Never blocks: it only reads what already arrived.  The notifications
    themselves carry nothing the tail needs -- it re-reads from its seq.
    """
    pgconn = listener.pgconn
    try:
        pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    while pgconn.notifies() is not None:
        pass
    return True
