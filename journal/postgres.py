"""PostgreSQL journal backend (``postgresql://user@host:port/db``), on psycopg 3.

Tables, created on first use (or by ``init_schema``) in the first schema of
the connection's ``search_path`` -- so ``?options=-csearch_path%3Dmy_schema``
in the URL puts a journal in a schema of its own:

``loopruntime_meta``
    ``schema_version`` (``codec.SCHEMA_VERSION``).  A database written by a
    newer version is refused with ``JournalSchemaError``.  A version-1
    database (which had no ``loopruntime_checkpoints``) is upgraded when
    opened, in one transaction under the same advisory lock that guards
    creating the tables: the empty index is created (version 1 wrote no
    checkpoints) and ``schema_version`` set to 2.  Processes still running
    version-1 code keep working on it; a new one of them is refused.
``loopruntime_sessions``
    one row per session: ``incarnation`` (writer fencing), ``head`` (last
    seq), ``digest`` (the head record's chain digest), timestamps.
``loopruntime_records``
    one row per record, primary key ``(session, seq)``, unique
    ``(session, id)``; the event is stored as the codec's msgpack bytes.
``loopruntime_checkpoints``
    the index of ``session.checkpoint`` records: ``(session, seq)``, the
    primary key.  Appends fill it in the transaction that inserts the
    records, so it holds exactly the committed checkpoints.

Writing.  ``open_session`` increments the session row's incarnation in one
statement; the row lock it takes waits for any append in flight, so the new
lease's ``head`` includes everything committed before it.  Appends from all
sessions that are waiting at the same moment are committed together (group
commit) by one writer connection, in one transaction that first locks the
sessions rows (``SELECT ... FOR UPDATE``, in session order, so two writers
cannot deadlock).  Then one of two paths:

* checked (two round trips): look up the drafts' event ids, check every
  append against the locked rows -- incarnation (``FencedError``), stored ids
  (idempotent re-append or ``DuplicateEventError``), ``expected_seq``
  (``ConflictError``) -- and write the appends that passed.  A failed check
  fails only its own append.
* fast (one round trip), when the writer already knows each session's
  incarnation, head and digest from its own last commit and each append
  continues from there: write at once, in plain statements pipelined
  between the lock and the commit -- the sessions' update, guarded by that
  known state, the records, the checkpoint index, the notifications.  When
  a session's row does not match the known state, or an event id is
  already stored (the unique index refuses it), the transaction fails, is
  rolled back, and the whole batch goes down the checked path.

Because every append is re-checked under the lock, a batch interrupted by a
lost connection is simply retried once on a new connection: an append that
had committed is found by its ids and returned, never written twice.  When
the retry fails too, the append raises ``JournalUnavailableError``; its
outcome is then unknown to this process and the caller learns it the same
way, by appending the same drafts again.

Reading pages through the records by seq on a small pool of connections and
verifies the digest chain.  ``checkpoints`` is one query: the index joined
with the records it names and the record before each, whose digest each
checkpoint is verified against.  ``tail`` follows appends through
LISTEN/NOTIFY: every append transaction notifies a per-session channel on
commit, and each tail holds its own listening connection, so a follower in
another process wakes on commit without polling.

psycopg's async API is asyncio-only, so its blocking calls run in trio
worker threads, one connection per thread at a time: the writer's through
``trio.to_thread`` (a hop costs ~60 us, small beside a commit), readers'
from a small pool.  Its exceptions are translated here and nowhere else: a
connection that cannot be opened or broke is ``JournalUnavailableError``, a
statement the server refused is a ``JournalError`` naming what was being
done.  Every connection speaks UTF-8 (a ``client_encoding`` in the URL or the
environment is overridden); text that is not Unicode (a lone surrogate) or
holds a NUL is refused with ``ValueError`` before anything is sent.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any, ClassVar, TypeVar

import msgspec
import psycopg
import structlog
import trio
from psycopg import postgres, pq, sql
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict

from .codec import (
    GENESIS,
    SCHEMA_VERSION,
    chain,
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
from .record import Draft, Record, check_text
from .store import SessionInfo, SessionLease

__all__ = ["PostgresJournal", "init_schema"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

_decoder = msgspec.msgpack.Decoder(Event)
"""This module's own decoder, for the read loop (see ``read``)."""

_READ_PAGE = 5000
"""Records fetched per round trip when reading: big enough that the round
trip is noise, small enough that a page of large events stays modest."""

_POOL_SIZE = 4
"""Connections for reads, heads and leases (the writer has its own)."""

_WRITERS = 1
"""Group commits in flight at once, each on its own connection.  Measured
(benchmarks/postgres.py, 16 sessions, fsync on): with two, each leader takes
whatever waits while the other commits, batches halve and the commits
double; with one, batches hold every waiting appender (16 of 16) and the
server flushes as often as the raw batched peer.  Kept as a knob for
servers where commit latency, not flushes, is the limit."""

_GATHER_ROUNDS = 4
"""Scheduler rounds a group-commit leader waits for the last batch's appenders."""

_CONNECT_TIMEOUT = "10"
"""Seconds to wait for a connection unless the URL says otherwise."""

_SCHEMA_LOCK = "loopruntime.schema"

# The index of session.checkpoint records (schema version 2).  Like the
# records, no foreign key: only the writer inserts, in the records' transaction.
_CREATE_CHECKPOINTS = """
CREATE TABLE loopruntime_checkpoints (
    session text NOT NULL,
    seq bigint NOT NULL,
    PRIMARY KEY (session, seq)
);
"""

_CREATE = f"""
CREATE TABLE loopruntime_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE loopruntime_sessions (
    session text PRIMARY KEY,
    incarnation bigint NOT NULL,
    head bigint NOT NULL,
    digest bytea NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
-- No foreign key to loopruntime_sessions: only the writer inserts, and only
-- for a session row it holds locked, so the key check would be pure cost.
CREATE TABLE loopruntime_records (
    session text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    loop text NOT NULL,
    at bigint NOT NULL,
    cause text,
    digest bytea NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (session, seq),
    UNIQUE (session, id)
);
{_CREATE_CHECKPOINTS}"""

_UPGRADES = {1: _CREATE_CHECKPOINTS}
"""The statements that take a schema from version ``key`` to ``key + 1``.
Version 1 could not write ``session.checkpoint`` records, so the index it
lacks starts empty and no record is read."""

# Arrays go in binary (%b): psycopg's text format escapes every element
# with a regular expression, which costs more than the rest of a small batch.
_LOCK_SESSIONS = """
SELECT session, incarnation, head, digest FROM loopruntime_sessions
WHERE session = ANY(%b::text[]) ORDER BY session FOR UPDATE
"""

_FIND_IDS = """
SELECT r.session, r.id, r.seq, r.loop, r.at, r.cause, r.digest, r.body
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

# The fast path: the writer already knows each session's state from its own
# last commit, so it writes at once, in plain statements sent in one pipeline
# after _LOCK_SESSIONS (whose snapshot then sees every committed record of
# those sessions).  Each statement can only fail the transaction: the guard
# divides by zero unless every session of the batch still holds exactly the
# known state (another writer, a stale expected_seq, ...), and the records
# insert fails on the unique index when an event id is already stored (a
# retry, a duplicate).  The writer then rolls back and decides the whole batch
# on the checked path.
_ADVANCE_GUARDED = """
WITH advanced AS (
    UPDATE loopruntime_sessions s SET head = u.head, digest = u.digest, updated_at = %b::bigint
    FROM unnest(%b::text[], %b::bigint[], %b::bigint[], %b::bytea[], %b::bigint[], %b::bytea[])
        AS u(session, incarnation, old_head, old_digest, head, digest)
    WHERE s.session = u.session AND s.incarnation = u.incarnation
      AND s.head = u.old_head AND s.digest = u.old_digest
    RETURNING 1
)
SELECT 1 / (count(*) = %b::bigint)::int FROM advanced
"""

_INSERT_RECORDS = """
INSERT INTO loopruntime_records (session, seq, id, loop, at, cause, digest, body)
SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], %b::bigint[],
                     %b::text[], %b::bytea[], %b::bytea[])
"""

_INSERT_CHECKPOINTS = """
INSERT INTO loopruntime_checkpoints (session, seq) SELECT * FROM unnest(%b::text[], %b::bigint[])
"""

_NOTIFY = "SELECT pg_notify(c, '') FROM unnest(%b::text[]) AS c"

# A seq range rather than ``seq > n LIMIT k``: seqs are gap-free, so the range
# is the page, and the server reads only those rows even when its statistics
# are stale (a young journal's always are) and it picks a bitmap scan + sort.
_PAGE = """
SELECT seq, id, loop, at, cause, digest, body FROM loopruntime_records
WHERE session = %s AND seq > %s AND seq <= %s ORDER BY seq
"""

# One row per checkpoint of the session: its record, and the digest of the
# record before it (NULL for seq 1, which chains from GENESIS).  Outer joins
# all the way, so a session without checkpoints is one row of NULLs, a
# missing session no row, and an index entry without its record is seen.
_CHECKPOINTS = """
SELECT c.seq, r.id, r.loop, r.at, r.cause, r.digest, r.body, p.digest
FROM loopruntime_sessions s
LEFT JOIN loopruntime_checkpoints c ON c.session = s.session
LEFT JOIN loopruntime_records r ON r.session = c.session AND r.seq = c.seq
LEFT JOIN loopruntime_records p ON p.session = c.session AND p.seq = c.seq - 1
WHERE s.session = %s ORDER BY c.seq
"""


# -- connections and errors -----------------------------------------------------


def _describe(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL server (unparsable URL)"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    user = str(params.get("user") or "")
    db = params.get("dbname") or user or "?"
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


def _connect(url: str) -> psycopg.Connection[Any]:
    """Blocking: open one autocommit connection (run it in a worker thread).

    The writer, the one that needs transactions, sends BEGIN and COMMIT
    itself, so a transaction can be a single pipeline (see ``_commit_fast``).
    """
    params = conninfo_to_dict(url)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params:
        # libpq waits forever for an unroutable host by default.
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    if "application_name" not in params:
        extra["application_name"] = "loopruntime"
    # Always UTF-8 on the wire, whatever the URL or PGCLIENTENCODING say: the
    # journal holds Python text, the writer encodes its arrays itself, and
    # with SQL_ASCII psycopg would read text back as bytes.  The server
    # converts to the database's encoding and refuses what it cannot hold.
    extra["client_encoding"] = "UTF8"
    return psycopg.connect(url, autocommit=True, **extra)


def _lost(conn: psycopg.Connection[Any] | None) -> bool:
    """Whether an error left ``conn`` unusable (or there never was one)."""
    return conn is None or conn.closed or conn.broken


def _translate(
    where: str, doing: str, exc: psycopg.Error, *, lost: bool, hint: str = ""
) -> JournalError:
    """The one place psycopg errors become journal errors.

    ``lost``: the connection could not be opened or broke, which makes the
    server unavailable.  Otherwise the server refused a statement (a limit,
    a permission, ...), which is a plain ``JournalError``.
    """
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    err: JournalError
    if lost:
        err = JournalUnavailableError(
            f"{doing} failed: cannot reach PostgreSQL at {where} ({reason}); check that the "
            f"server is running and the URL is right{hint}"
        )
    else:
        err = JournalError(f"{doing} failed on PostgreSQL at {where}: {reason}{hint}")
    err.__cause__ = exc
    return err


def _discard(conn: psycopg.Connection[Any] | None) -> None:
    """Blocking: close a connection that may already be broken."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            # Closing a broken connection can fail; it is gone either way.
            pass


def _check_text(what: str, value: str | None) -> None:
    if value is None:
        return
    if "\x00" in value:
        raise ValueError(
            f"{what} {value!r} contains a NUL character, which PostgreSQL text cannot "
            "store; remove it"
        )
    check_text(what, value)


def _channel(schema: str, session: str) -> str:
    """The NOTIFY channel of one session (an identifier, so at most 63 bytes)."""
    key = hashlib.blake2b(f"{schema}\x00{session}".encode(), digest_size=12).hexdigest()
    return f"loopruntime_{key}"


# -- schema -----------------------------------------------------------------------


def _prepare_schema(conn: psycopg.Connection[Any], where: str) -> str:
    """Blocking: create the tables when absent, check the version; return the schema.

    Upgrades a version-1 schema to the current one.  Runs in one transaction
    under an advisory lock, so processes opening a fresh (or version-1)
    database at the same time create (or upgrade) the tables once, and a
    failed upgrade leaves the database as it was.
    """
    with conn.transaction():
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = row[0] if row else None
        if schema is None:
            raise JournalError(
                f"{where}: no schema of the search_path exists, so there is nowhere to put "
                "the journal tables; create the schema or fix search_path in the URL"
            )
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s || %s))", (_SCHEMA_LOCK, schema))
        tables = conn.execute(
            "SELECT to_regclass('loopruntime_meta'), to_regclass('loopruntime_sessions'), "
            "to_regclass('loopruntime_records'), to_regclass('loopruntime_checkpoints')"
        ).fetchone()
        assert tables is not None
        meta, sessions, records, checkpoints = tables
        if meta is None:
            if sessions is not None or records is not None or checkpoints is not None:
                raise NotAJournalError(
                    f"{where} schema {schema} has loopruntime tables but no loopruntime_meta "
                    "table; it is not a journal this code wrote: use another schema"
                )
            conn.execute(_CREATE)
            conn.execute(
                "INSERT INTO loopruntime_meta (key, value) VALUES ('schema_version', %s)",
                (str(SCHEMA_VERSION),),
            )
            log.info("postgres_journal_created", where=where, schema=schema)
            return str(schema)
        version = conn.execute(
            "SELECT value FROM loopruntime_meta WHERE key = 'schema_version'"
        ).fetchone()
        if version is None or not version[0].isdigit():
            raise NotAJournalError(
                f"{where} schema {schema}: loopruntime_meta has no valid schema_version; "
                "it is not a journal this code wrote"
            )
        found = int(version[0])
        check_schema_version(found, where=f"{where} (schema {schema})")
        if found < SCHEMA_VERSION:
            for step in range(found, SCHEMA_VERSION):
                conn.execute(_UPGRADES[step])
            conn.execute(
                "UPDATE loopruntime_meta SET value = %s WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
            )
            log.info(
                "postgres_journal_upgraded",
                where=where,
                schema=schema,
                version=SCHEMA_VERSION,
                was=found,
            )
        elif checkpoints is None:
            raise NotAJournalError(
                f"{where} schema {schema}: journal schema {found} but no "
                "loopruntime_checkpoints table; its tables were changed by hand: restore "
                "them or use another schema"
            )
        return str(schema)


def _open_prepared(url: str, where: str) -> tuple[psycopg.Connection[Any], str]:
    """Blocking: connect and prepare the schema; return the connection and the schema."""
    try:
        conn = _connect(url)
    except psycopg.Error as exc:
        raise _translate(where, "connecting", exc, lost=True) from exc
    try:
        return conn, _prepare_schema(conn, where)
    except psycopg.Error as exc:
        lost = _lost(conn)
        _discard(conn)
        raise _translate(where, "preparing the journal tables", exc, lost=lost) from exc
    except BaseException:
        _discard(conn)
        raise


async def init_schema(url: str) -> None:
    """Create the journal tables at ``url`` if absent and check their version.

    Idempotent.  Raises ``JournalUnavailableError`` when the server cannot be
    reached and ``JournalSchemaError`` when the database holds a newer schema.
    """
    conn, _ = await trio.to_thread.run_sync(_open_prepared, url, _describe(url))
    await trio.to_thread.run_sync(_discard, conn)


# -- the reader pool ------------------------------------------------------------------


class _Pool:
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
        is safe to repeat) ``fn`` runs once more on a new connection before
        ``JournalUnavailableError`` is raised.
        """
        async with self._limit:
            for attempt in (1, 2):
                if self.closed:
                    raise JournalClosedError(f"journal {self._where} is closed")
                conn = self._idle.pop() if self._idle else None
                try:
                    if conn is None:
                        conn = await trio.to_thread.run_sync(_connect, self._url)
                    result = await trio.to_thread.run_sync(fn, conn)
                except psycopg.Error as exc:
                    if not _lost(conn):
                        self._return(conn)
                        raise _translate(self._where, doing, exc, lost=False) from exc
                    # Shielded: closing is quick and must happen even when the
                    # caller is being cancelled, or the connection leaks.
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(_discard, conn)
                    if attempt == 2 or not retry:
                        raise _translate(self._where, doing, exc, lost=True) from exc
                    log.warning("postgres_retry", where=self._where, doing=doing, error=str(exc))
                    continue
                except BaseException:
                    self._return(conn)
                    raise
                self._return(conn)
                return result
        raise AssertionError("unreachable")

    def _return(self, conn: psycopg.Connection[Any] | None) -> None:
        if conn is None:
            return
        if self.closed or conn.closed:
            _discard(conn)
        else:
            self._idle.append(conn)

    def close(self) -> None:
        """Blocking: close the idle connections; busy ones close when returned."""
        self.closed = True
        while self._idle:
            _discard(self._idle.pop())


class _Ahead:
    """A page fetched by a system task while the reader works through the previous one.

    A system task rather than a child task because a read is an async
    generator, which must not own a nursery.  The fetch is one short query;
    it returns its connection to the pool whether or not the page is ever
    collected (the reader may stop early).
    """

    def __init__(
        self, pool: _Pool, doing: str, fetch: Callable[[psycopg.Connection[Any]], list[Any]]
    ) -> None:
        self._done = trio.Event()
        self._rows: list[Any] = []
        self._error: Exception | None = None
        trio.lowlevel.spawn_system_task(self._fetch, pool, doing, fetch)

    async def _fetch(
        self, pool: _Pool, doing: str, fetch: Callable[[psycopg.Connection[Any]], list[Any]]
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


# -- binary arrays ------------------------------------------------------------------
#
# The fast path sends its columns as arrays it encodes itself, in PostgreSQL's
# binary array format.  psycopg's list dumper is Python that looks up a dumper
# for every element: ~210 us for the 16 arrays of a group commit of 16
# appends, a quarter of the commit, against ~40 us for these (measured on 2
# cores).  The checked path, which runs far less often, keeps psycopg's.


class _Array(bytes):
    """A one-dimensional array already in PostgreSQL's binary format, for a ``%b``."""

    __slots__ = ()
    oid: ClassVar[int]


class _TextArray(_Array):
    __slots__ = ()
    oid = postgres.types["text"].array_oid


class _Int8Array(_Array):
    __slots__ = ()
    oid = postgres.types["int8"].array_oid


class _ByteaArray(_Array):
    __slots__ = ()
    oid = postgres.types["bytea"].array_oid


class _ArrayDumper(Dumper):
    """Passes an ``_Array`` through as it is, typed by its class."""

    format = pq.Format.BINARY

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        assert issubclass(cls, _Array)
        self.oid = cls.oid

    def dump(self, obj: Any) -> bytes:
        return obj


_ARRAY_HEADER = struct.Struct("!iiIii")
"""Dimensions (1), whether any element is NULL, element type, length, lower bound (1)."""

_INT8_ELEMENT = struct.Struct("!iq")
"""An int8 element: its length (8) and value."""

_NULL_ELEMENT = struct.pack("!i", -1)

_TEXT_OID = postgres.types["text"].oid
_BYTEA_OID = postgres.types["bytea"].oid
_INT8_OID = postgres.types["int8"].oid


def _varlena_array(element: int, values: Sequence[bytes | None]) -> bytes:
    """The binary array of ``values``: elements of type ``element`` already encoded, None NULL."""
    if not values:
        return struct.pack("!iiI", 0, 0, element)
    parts = [_ARRAY_HEADER.pack(1, None in values, element, len(values), 1)]
    for value in values:
        if value is None:
            parts.append(_NULL_ELEMENT)
        else:
            parts.append(len(value).to_bytes(4, "big"))
            parts.append(value)
    return b"".join(parts)


def _text_array(values: Sequence[str | None], encoding: str) -> _TextArray:
    """A ``text[]`` parameter; ``encoding`` is the connection's (``conn.info.encoding``)."""
    encoded = [None if v is None else v.encode(encoding) for v in values]
    return _TextArray(_varlena_array(_TEXT_OID, encoded))


def _bytea_array(values: Sequence[bytes]) -> _ByteaArray:
    return _ByteaArray(_varlena_array(_BYTEA_OID, values))


def _int8_array(values: Sequence[int]) -> _Int8Array:
    if not values:
        return _Int8Array(struct.pack("!iiI", 0, 0, _INT8_OID))
    header = _ARRAY_HEADER.pack(1, 0, _INT8_OID, len(values), 1)
    return _Int8Array(header + b"".join([_INT8_ELEMENT.pack(8, v) for v in values]))


def _writer_connection(url: str) -> psycopg.Connection[Any]:
    """Blocking: a connection for the writer, which sends ``_Array`` parameters."""
    conn = _connect(url)
    conn.adapters.register_dumper(_Array, _ArrayDumper)
    return conn


# -- the writer ---------------------------------------------------------------------


class _Append:
    """One append waiting for the group commit."""

    __slots__ = ("bodies", "drafts", "expected_seq", "lease", "result", "taken")

    def __init__(
        self, lease: SessionLease, drafts: Sequence[Draft], expected_seq: int, bodies: list[bytes]
    ) -> None:
        self.lease, self.drafts, self.expected_seq, self.bodies = (
            lease,
            drafts,
            expected_seq,
            bodies,
        )
        self.result: list[Record] | BaseException | None = None
        self.taken = False
        """A leader took it into a batch: its outcome is no longer ours to drop."""


class _Head:
    """A session's locked state while a batch is being checked."""

    __slots__ = ("digest", "head", "incarnation", "written")

    def __init__(self, incarnation: int, head: int, digest: bytes) -> None:
        self.incarnation, self.head, self.digest = incarnation, head, digest
        self.written = False


_Known = tuple[int, int, bytes]
"""A session's incarnation, head and head digest as a writer of this journal
last committed them: a guess that the fast path checks, never trusted."""

_Stored = tuple[int, str, int, str | None, bytes, bytes]
"""A stored row found by event id: seq, loop, at, cause, digest, body."""


class _Writer:
    """The group-commit writer: one connection, used by one thread at a time."""

    def __init__(self, url: str, where: str, schema: str, known: dict[str, _Known]) -> None:
        self._url, self._where, self._schema = url, where, schema
        self._conn: psycopg.Connection[Any] | None = None
        self._known = known

    def commit(self, batch: list[_Append]) -> None:
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
                if not _lost(self._conn):
                    # The server refused a statement; find the append that
                    # caused it by committing each alone.
                    self._rollback()
                    if len(batch) > 1:
                        for item in batch:
                            self.commit([item])
                    else:
                        batch[0].result = _translate(self._where, "append", exc, lost=False)
                    return
                _discard(self._conn)
                self._conn = None
                if attempt == 2:
                    err = _translate(
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
                _discard(self._conn)
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
            _discard(self._conn)
            self._conn = None

    def close(self) -> None:
        _discard(self._conn)
        self._conn = None

    def _commit_once(
        self, conn: psycopg.Connection[Any], batch: list[_Append]
    ) -> list[list[Record] | BaseException]:
        """Commit ``batch``: on the fast path when it applies and succeeds, else checked."""
        planned = self._plan_fast(batch)
        if planned is not None and self._commit_fast(conn, batch, planned):
            return [*planned[1]]
        return self._commit_checked(conn, batch)

    def _plan_fast(self, batch: list[_Append]) -> tuple[int, list[list[Record]]] | None:
        """Records for every append of ``batch`` from the known states, or None.

        None when the fast path does not apply: a session not known (or known
        at another head), a session appended twice in the batch, one id twice
        in an append.  The plan is a guess until ``_commit_fast`` confirms it.
        """
        sessions = [item.lease.session for item in batch]
        if len(set(sessions)) != len(sessions):
            return None
        now = time.time_ns()
        plans = []
        for item in batch:
            known = self._known.get(item.lease.session)
            if known is None or known[0] != item.lease.incarnation or known[1] != item.expected_seq:
                return None
            if len({d.id for d in item.drafts}) != len(item.drafts):
                return None
            head, digest = known[1], known[2]
            records = []
            for d, body in zip(item.drafts, item.bodies, strict=True):
                head += 1
                digest = chain(digest, body)
                records.append(
                    Record(
                        seq=head,
                        id=d.id,
                        session=item.lease.session,
                        loop=d.loop,
                        at=now,
                        cause=d.cause,
                        digest=digest,
                        event=d.event,
                    )
                )
            plans.append(records)
        return now, plans

    def _commit_fast(
        self,
        conn: psycopg.Connection[Any],
        batch: list[_Append],
        planned: tuple[int, list[list[Record]]],
    ) -> bool:
        """Write the planned appends in one round trip: all of them, or (False) none.

        False when a session no longer holds its known state or an event id
        is already stored (or the server refused a statement); those sessions
        are then forgotten, and the checked path that decides the batch
        learns their state again.
        """
        now, plans = planned
        sessions = [item.lease.session for item in batch]
        known = [self._known[s] for s in sessions]
        # An append may have no drafts: its session keeps its head and digest.
        after = [
            (k[0], records[-1].seq, records[-1].digest) if records else k
            for k, records in zip(known, plans, strict=True)
        ]
        records = [r for rs in plans for r in rs]
        marks = [r for r in records if isinstance(r.event, SessionCheckpoint)]
        encoding = conn.info.encoding
        # Every parameter is encoded before anything is sent, so an encoding
        # failure cannot stop the pipeline between two statements.
        lock = (_text_array(sorted(sessions), encoding),)
        advance = (
            now,
            _text_array(sessions, encoding),
            _int8_array([k[0] for k in known]),
            _int8_array([k[1] for k in known]),
            _bytea_array([k[2] for k in known]),
            _int8_array([a[1] for a in after]),
            _bytea_array([a[2] for a in after]),
            len(sessions),
        )
        insert = (
            _text_array([r.session for r in records], encoding),
            _int8_array([r.seq for r in records]),
            _text_array([r.id for r in records], encoding),
            _text_array([r.loop for r in records], encoding),
            _int8_array([r.at for r in records]),
            _text_array([r.cause for r in records], encoding),
            _bytea_array([r.digest for r in records]),
            _bytea_array([b for item in batch for b in item.bodies]),
        )
        index = (
            _text_array([r.session for r in marks], encoding),
            _int8_array([r.seq for r in marks]),
        )
        notify = (_text_array([_channel(self._schema, s) for s in sessions], encoding),)
        try:
            with conn.pipeline():
                # Explicit BEGIN and COMMIT on an autocommit connection: the whole
                # transaction is one round trip (psycopg would wait for its own
                # BEGIN, then sync after a commit()).
                conn.execute("BEGIN")
                # Rows locked in session order, like the checked path, so two
                # writers (of this process or another) cannot deadlock.
                conn.execute(_LOCK_SESSIONS, lock)
                conn.execute(_ADVANCE_GUARDED, advance)
                if records:
                    conn.execute(_INSERT_RECORDS, insert)
                if marks:
                    conn.execute(_INSERT_CHECKPOINTS, index)
                conn.execute(_NOTIFY, notify)
                conn.execute("COMMIT")
        except psycopg.Error:
            if _lost(conn):
                raise
            # The guard failed or an id is stored (or the server refused a
            # statement, which the checked path will report): nothing was
            # written.
            conn.rollback()
            for session in sessions:
                self._known.pop(session, None)
            return False
        for session, state in zip(sessions, after, strict=True):
            self._known[session] = state
        return True

    def _commit_checked(
        self, conn: psycopg.Connection[Any], batch: list[_Append]
    ) -> list[list[Record] | BaseException]:
        """Lock, look up, check each append, write those that pass: two round trips."""
        sessions = sorted({item.lease.session for item in batch})
        want_sessions = [item.lease.session for item in batch for _ in item.drafts]
        want_ids = [d.id for item in batch for d in item.drafts]
        with conn.pipeline():
            conn.execute("BEGIN")
            locked = conn.execute(_LOCK_SESSIONS, (sessions,))
            found = conn.execute(_FIND_IDS, (want_sessions, want_ids))
            heads = {s: _Head(inc, head, digest) for s, inc, head, digest in locked.fetchall()}
            stored: dict[tuple[str, str], _Stored] = {
                (s, i): (seq, loop, at, cause, digest, body)
                for s, i, seq, loop, at, cause, digest, body in found.fetchall()
            }
            now = time.time_ns()
            rows: list[tuple[Any, ...]] = []
            marks: list[tuple[str, int]] = []
            results = [self._check(item, heads, stored, rows, marks, now) for item in batch]
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
                        [_channel(self._schema, s) for s in written],
                    ),
                )
            conn.execute("COMMIT")
        for s, h in heads.items():
            self._known[s] = (h.incarnation, h.head, h.digest)
        return results

    def _check(
        self,
        item: _Append,
        heads: dict[str, _Head],
        stored: dict[tuple[str, str], _Stored],
        rows: list[tuple[Any, ...]],
        marks: list[tuple[str, int]],
        now: int,
    ) -> list[Record] | BaseException:
        """Decide one append against the locked state; queue its rows when it passes.

        The seqs of its ``session.checkpoint`` records go to ``marks``, for the index.
        """
        session, drafts = item.lease.session, item.drafts
        h = heads.get(session)
        if h is None:
            return SessionNotFoundError(session)
        if item.lease.incarnation != h.incarnation:
            return FencedError(session, item.lease.incarnation, h.incarnation)
        # Before the stored ids: one id twice is never a retry of an append,
        # even when that id is stored (no such append can have committed).
        seen: set[str] = set()
        for d in drafts:
            if d.id in seen:
                return DuplicateEventError(session, d.id)
            seen.add(d.id)
        hits = [stored.get((session, d.id)) for d in drafts]
        if any(hit is not None for hit in hits):
            records = []
            for d, body, hit in zip(drafts, item.bodies, hits, strict=True):
                if hit is None or hit[5] != body or hit[1] != d.loop:
                    return DuplicateEventError(session, d.id)
                seq, loop, at, cause, digest, _ = hit
                records.append(
                    Record(
                        seq=seq,
                        id=d.id,
                        session=session,
                        loop=loop,
                        at=at,
                        cause=cause,
                        digest=digest,
                        event=d.event,
                    )
                )
            return records
        if item.expected_seq != h.head:
            return ConflictError(session, item.expected_seq, h.head)
        records = []
        for d, body in zip(drafts, item.bodies, strict=True):
            h.head += 1
            h.digest = chain(h.digest, body)
            rows.append((session, h.head, d.id, d.loop, now, d.cause, h.digest, body))
            if isinstance(d.event, SessionCheckpoint):
                marks.append((session, h.head))
            # A later append of this batch re-sending these ids finds them here.
            stored[(session, d.id)] = (h.head, d.loop, now, d.cause, h.digest, body)
            records.append(
                Record(
                    seq=h.head,
                    id=d.id,
                    session=session,
                    loop=d.loop,
                    at=now,
                    cause=d.cause,
                    digest=h.digest,
                    event=d.event,
                )
            )
        h.written = True
        return records


# -- the journal ----------------------------------------------------------------------


class PostgresJournal:
    """Journal in a PostgreSQL database (``postgresql://...``); see the module docstring.

    Open it with ``await PostgresJournal.open(url)`` (or ``open_journal``);
    close it with ``aclose()``.  Any number of processes may open the same
    database: fencing and the row locks keep each session single-writer.
    """

    def __init__(self, url: str, where: str, schema: str, pool: _Pool) -> None:
        self.url = url
        self._where, self._schema, self._pool = where, schema, pool
        known: dict[str, _Known] = {}
        self._idle_writers = [_Writer(url, where, schema, known) for _ in range(_WRITERS)]
        self._pending: list[_Append] = []
        self._written = trio.Event()
        self._last_batch = 1
        self._tail_waits: set[trio.CancelScope] = set()
        self._closed = False

    @classmethod
    async def open(cls, url: str) -> PostgresJournal:
        """Connect, create the tables when absent, and check the schema version.

        Raises ``JournalUnavailableError`` when the server cannot be reached,
        ``JournalSchemaError`` when the database holds a newer schema.
        """
        where = _describe(url)
        conn, schema = await trio.to_thread.run_sync(_open_prepared, url, where)
        pool = _Pool(url, where)
        pool.give(conn)
        return cls(url, where, schema, pool)

    # -- writing --------------------------------------------------------------------

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        """Take the write lease of ``session``, fencing every older lease.

        Waits for an append in flight on the session to finish, so the
        lease's ``head`` counts every record committed before it.
        """
        self._check_open()
        _check_text("session id", session)
        now = time.time_ns()

        def work(conn: psycopg.Connection[Any]) -> tuple[int, int] | None:
            if create:
                cur = conn.execute(
                    "INSERT INTO loopruntime_sessions AS s "
                    "(session, incarnation, head, digest, created_at, updated_at) "
                    "VALUES (%s, 1, 0, %s, %s, %s) ON CONFLICT (session) "
                    "DO UPDATE SET incarnation = s.incarnation + 1 RETURNING incarnation, head",
                    (session, GENESIS, now, now),
                )
            else:
                cur = conn.execute(
                    "UPDATE loopruntime_sessions SET incarnation = incarnation + 1 "
                    "WHERE session = %s RETURNING incarnation, head",
                    (session,),
                )
            row = cur.fetchone()
            return (int(row[0]), int(row[1])) if row else None

        # Not retried: a lost connection may have bumped the incarnation, and
        # a second bump would be harmless but surprising; the caller decides.
        got = await self._pool.run(f"opening session {session}", work, retry=False)
        if got is None:
            raise SessionNotFoundError(session)
        return SessionLease(session=session, incarnation=got[0], head=got[1])

    async def append(
        self, lease: SessionLease, drafts: Sequence[Draft], *, expected_seq: int
    ) -> list[Record]:
        """Append ``drafts`` atomically after ``expected_seq``; return them as records.

        Durable on return (the transaction committed).  Idempotent by event
        id.  Atomic under cancellation: cancelled before the batch carrying
        this append is sent, it raises ``Cancelled`` and nothing is written;
        once sent, the call waits for the batch's outcome and reports it.
        """
        self._check_open()
        # A lease is plain data a caller can build: its session id is bound in
        # the batch's statements too, so bad text there must fail this call alone.
        _check_text("session id", lease.session)
        for d in drafts:
            _check_text("event id", d.id)
            _check_text("loop id", d.loop)
            _check_text("cause", d.cause)
        item = _Append(lease, drafts, expected_seq, [encode_checked(d.event) for d in drafts])
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
                batch: list[_Append] = []
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

    # -- reading --------------------------------------------------------------------

    async def read(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """Yield the session's records after seq ``after``, verifying the chain.

        A damaged record raises ``JournalCorruptError`` after every good
        record before it was yielded.  Each page is its own query, so no
        connection or transaction is held while the consumer works.
        """
        self._check_open()

        def start(conn: psycopg.Connection[Any]) -> tuple[bytes, list[tuple[Any, ...]]] | None:
            row = conn.execute(
                "SELECT (SELECT digest FROM loopruntime_records WHERE session = %s AND seq = %s)"
                " FROM loopruntime_sessions WHERE session = %s",
                (session, after, session),
            ).fetchone()
            if row is None:
                return None
            return row[0] or GENESIS, _page(conn, session, after)

        doing = f"reading session {session}"
        first = await self._pool.run(doing, start)
        if first is None:
            raise SessionNotFoundError(session)
        previous, page = first
        seq = after
        decode, blake2b = _decoder.decode, hashlib.blake2b
        while page:
            # A full page may have more behind it: fetch that while this one is
            # verified and decoded, so the round trip costs no time here.
            ahead = None
            if len(page) == _READ_PAGE and not self._closed:
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
                if blake2b(previous + body, digest_size=16).digest() != digest:
                    raise JournalCorruptError(session, seq, "digest chain broken")
                previous = digest
                try:
                    event: Event = decode(body)
                except msgspec.DecodeError:
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
        channel = _channel(self._schema, session)
        listener = await self._listen(channel)
        try:
            seq = after
            while not self._closed:
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
                    listener = await self._listen(channel)
        finally:
            _close_listener(listener)

    async def _listen(self, channel: str) -> psycopg.Connection[Any]:
        def work() -> psycopg.Connection[Any]:
            conn = _connect(self.url)
            try:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            except BaseException:
                _discard(conn)
                raise
            return conn

        try:
            return await trio.to_thread.run_sync(work)
        except psycopg.Error as exc:
            raise _translate(self._where, "following a session", exc, lost=True) from exc

    async def _wait_notified(self, listener: psycopg.Connection[Any]) -> bool:
        """Wait until the listening socket is readable; True when the journal closed."""
        if self._closed:
            return True
        with trio.CancelScope() as scope:
            self._tail_waits.add(scope)
            try:
                await trio.lowlevel.wait_readable(listener.fileno())
            finally:
                self._tail_waits.discard(scope)
        return self._closed

    async def head(self, session: str) -> int:
        self._check_open()

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
        """The session's ``session.checkpoint`` records, in seq order, from the index.

        One query, whatever the session's length.  Each checkpoint is
        verified against the stored digest of the record before it; a broken
        one raises ``JournalCorruptError`` with its seq.  Verified and decoded
        in the worker thread: a chain of checkpoints holds about the whole
        message history, too much to decode between two trio checkpoints.
        """
        self._check_open()

        def work(conn: psycopg.Connection[Any]) -> list[Record] | None:
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(_CHECKPOINTS, (session,)).fetchall()
            if not rows:
                return None
            # A session without checkpoints is its one row of NULLs.
            return checkpoint_records(session, [row for row in rows if row[0] is not None])

        found = await self._pool.run(f"reading the checkpoints of session {session}", work)
        if found is None:
            raise SessionNotFoundError(session)
        return found

    async def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        self._check_open()

        def work(conn: psycopg.Connection[Any]) -> list[SessionInfo]:
            rows = conn.execute(
                "SELECT session, head, incarnation, created_at, updated_at "
                "FROM loopruntime_sessions ORDER BY created_at, session"
            ).fetchall()
            return [
                SessionInfo(session=s, head=h, incarnation=i, created_at=c, updated_at=u)
                for s, h, i, c, u in rows
            ]

        return await self._pool.run("listing sessions", work)

    async def aclose(self) -> None:
        """Close the journal: wait for a commit in flight, then close every connection.

        Appends still waiting for a group commit fail with
        ``JournalClosedError``; tails end.  Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        for scope in self._tail_waits:
            scope.cancel()
        with trio.CancelScope(shield=True):
            # The commit in flight decides its appends' outcomes; let it finish.
            while len(self._idle_writers) < _WRITERS:
                await self._written.wait()
            self._written.set()
            for writer in self._idle_writers:
                await trio.to_thread.run_sync(writer.close)
            await trio.to_thread.run_sync(self._pool.close)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self._where} is closed")


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
    _discard(listener)


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
