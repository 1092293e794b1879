"""PostgreSQL journal (``postgresql://user@host:port/db``), on psycopg 3.

``PostgresJournal`` is the facade: it checks and encodes each call on the
trio thread, hands appends to the group commit (``writer.py``) and reads to
the pool (``reading.py``).  The tables and the translation of psycopg's
errors are ``schema.py``.  The tables, the two commit paths and the retry
rule are described in ``docs/journal.md``.  Text that is not Unicode (a lone
surrogate) or holds a NUL is refused with ``ValueError`` before anything is
sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from functools import partial

import trio

from ..blobs import DEFAULT_BLOB_THRESHOLD, check_threshold, choose_threshold, encode_pending
from ..errors import JournalClosedError, LeaseHeldError, SessionNotFoundError
from ..inbox import (
    Claim,
    Consumed,
    InboxCommand,
    InboxEntry,
    Wakeup,
    encode_command,
    encode_outcome,
    entry_limit,
    wakeup_of,
)
from ..location import parse_location
from ..record import Draft, Record
from ..rules import ttl_ns
from ..store import (
    TAIL_LIMIT,
    Checkpointed,
    HostInfo,
    SessionInfo,
    SessionLease,
    StorageCheck,
    WriterSpan,
    check_tail_limit,
)
from . import leases
from .leases import renew_all as _renew_all
from .reading import Pool, Reading
from .schema import check_pg_text, describe, inbox_channel, open_prepared
from .writer import Append, GroupCommit

__all__ = ["PostgresJournal"]


class PostgresJournal:
    """Journal in a PostgreSQL database (``postgresql://...``).

    Open it with ``await PostgresJournal.open(url)`` (or ``open_journal``);
    close it with ``aclose()``.  Any number of processes may open the same
    database: fencing and the row locks keep each session single-writer.
    """

    def __init__(
        self,
        url: str,
        where: str,
        schema: str,
        pool: Pool,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
        *,
        conninfo: str | None = None,
    ) -> None:
        self.url = url
        self.blob_threshold = check_threshold(blob_threshold)
        self.max_entry_bytes = entry_limit(url)
        self._where, self._pool = where, pool
        self._commits = GroupCommit(conninfo or url, where, schema)
        self._inbox_channel = inbox_channel(schema)
        self._reading = Reading(conninfo or url, where, schema, pool)
        self._renewals = Pool(conninfo or url, where)
        """Lease renewals and host registrations only, one at a time per host
        in practice: a renewal never waits for a connection behind sessions'
        reads (a lease lost to a busy pool moves a live session to another host)."""
        self._closed = False

    @classmethod
    async def open(cls, url: str, *, blob_threshold: int | None = None) -> PostgresJournal:
        """Connect, create the tables when absent, and check the schema version.

        Raises ``JournalUnavailableError`` when the server cannot be reached,
        ``JournalSchemaError`` when the database holds a newer schema,
        ``ValueError`` for a ``blob_threshold`` that is not a positive number
        of bytes or differs from the URL's (``journal.blobs``; None takes the
        URL's, else the default).  libpq gets the URL without loopruntime's
        options (``journal.location``).
        """
        location = parse_location(url)
        conninfo = location.conninfo or url
        threshold = choose_threshold(blob_threshold, location.blob_threshold, url)
        where = describe(conninfo)
        conn, schema = await trio.to_thread.run_sync(open_prepared, conninfo, where)
        pool = Pool(conninfo, where)
        pool.give(conn)
        return cls(url, where, schema, pool, threshold, conninfo=conninfo)

    # -- writing --------------------------------------------------------------------

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        """Take the write lease of ``session``, fencing every older lease.

        Waits for an append in flight on the session to finish, so the
        lease's ``head`` counts every record committed before it.
        """
        self._check_open()
        check_pg_text("session id", session)
        # Not retried: a lost connection may have bumped the incarnation, and
        # a second bump would be harmless but surprising; the caller decides.
        got = await self._pool.run(
            f"opening session {session}",
            partial(leases.open_session, session=session, create=create),
            retry=False,
        )
        if got is None:
            raise SessionNotFoundError(session)
        return got

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        """Take the session's lease for ``owner`` (see ``journal.store``)."""
        self._check_open()
        check_pg_text("session id", session)
        check_pg_text("owner", owner)
        check_pg_text("definition", definition)
        work = partial(
            leases.lease_op,
            op="acquire",
            session=session,
            owner=owner,
            ttl=ttl_ns(ttl),
            create=create,
            definition=definition,
        )
        got = await self._pool.run(f"taking the lease of session {session}", work, retry=False)
        assert got is not None
        return got

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        """Take ``sessions`` for ``owner`` in one transaction (see ``journal.store``)."""
        self._check_open()
        for session in sessions:
            check_pg_text("session id", session)
        check_pg_text("owner", owner)
        span = ttl_ns(ttl)
        if not sessions:
            return []
        work = partial(leases.acquire_all, sessions=list(sessions), owner=owner, ttl=span)
        # Not retried, as ``acquire``: a lost answer may hide takes that committed.
        return await self._pool.run(
            f"taking the leases of {len(sessions)} sessions", work, retry=False
        )

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease:
        self._check_open()
        check_pg_text("session id", lease.session)
        work = partial(
            leases.lease_op,
            op="renew",
            session=lease.session,
            owner=lease.owner,
            ttl=ttl_ns(ttl),
            incarnation=lease.incarnation,
        )
        # Safe to repeat: a renewal that committed is renewed again.
        got = await self._pool.run(f"renewing the lease of session {lease.session}", work)
        assert got is not None
        return got

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        """Renew ``leases`` in one transaction (see ``journal.store``), on the
        renewals' own connection: never queued behind the pool's reads."""
        self._check_open()
        for lease in leases:
            check_pg_text("session id", lease.session)
        span = ttl_ns(ttl)
        if not leases:
            return []
        wanted = [(lease.session, lease.incarnation, lease.owner) for lease in leases]
        work = partial(_renew_all, leases=wanted, ttl=span)
        # Safe to repeat: a renewal that committed is renewed again.
        return await self._renewals.run(f"renewing {len(wanted)} leases", work)

    async def release(
        self, lease: SessionLease, *, handoff: bool = False, definition: str | None = None
    ) -> None:
        self._check_open()
        check_pg_text("session id", lease.session)
        check_pg_text("definition", definition)
        work = partial(
            leases.lease_op,
            op="release",
            session=lease.session,
            incarnation=lease.incarnation,
            handoff=handoff,
            definition=definition,
            notify=self._inbox_channel,
        )
        await self._pool.run(f"releasing the lease of session {lease.session}", work, retry=False)

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        """Store ``command`` in the session's inbox under ``key`` (see ``journal.store``).

        Safe to retry after a lost connection: the key finds the stored entry."""
        self._check_open()
        check_pg_text("session id", session)
        check_pg_text("key", key)
        check_pg_text("definition", definition)
        body = encode_command(command, session, self.max_entry_bytes)
        work = partial(
            leases.put,
            session=session,
            key=key,
            body=body,
            definition=definition,
            notify=self._inbox_channel,
        )
        row = await self._pool.run(f"putting a command in the inbox of {session}", work)
        return leases.entry_of(session, row)

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        self._check_open()
        return await self._pool.run(
            f"reading the inbox of session {session}",
            partial(leases.inbox, session=session, after=after),
        )

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        self._check_open()
        return await self._pool.run(
            f"reading the inbox of session {session}",
            partial(leases.entry, session=session, key=key),
        )

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        self._check_open()
        return await self._pool.run(
            "finding sessions with work",
            partial(leases.claimable, definitions=list(definitions), owner=owner, limit=limit),
        )

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        """Register ``host`` for ``token`` (see ``journal.store``), on the server's clock."""
        self._check_open()
        check_pg_text("host id", host)
        check_pg_text("token", token)
        names = list(definitions)
        for name in names:
            check_pg_text("definition", name)
        work = partial(
            leases.register_host, host=host, token=token, definitions=names, ttl=ttl_ns(ttl)
        )
        # Safe to repeat: the same token registering again renews.
        expires_at: int = await self._renewals.run(f"registering host {host}", work)
        return expires_at

    async def deregister_host(self, host: str, token: str) -> None:
        self._check_open()
        check_pg_text("host id", host)
        work = partial(leases.deregister_host, host=host, token=token)
        await self._pool.run(f"deregistering host {host}", work)

    async def hosts(self) -> list[HostInfo]:
        self._check_open()
        return await self._pool.run("listing hosts", leases.hosts)

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
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
        check_pg_text("session id", lease.session)
        for d in drafts:
            check_pg_text("event id", d.id)
            check_pg_text("loop id", d.loop)
            check_pg_text("cause", d.cause)
        pending, blobs = encode_pending(drafts, self.blob_threshold)
        item = Append(
            lease,
            pending,
            expected_seq,
            [(c.entry, encode_outcome(c.outcome)) for c in consumes] if consumes else None,
            blobs or None,
        )
        return await self._commits.submit(item)

    # -- reading --------------------------------------------------------------------

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        """Yield the session's records after seq ``after``, verifying the chain.

        A damaged record raises ``JournalCorruptError`` after every good
        record before it was yielded.  Each page is its own query, so no
        connection or transaction is held while the consumer works.  The
        records of ``skip_stream`` are verified but neither decoded nor yielded.
        """
        return self._reading.read(session, after=after, skip_stream=skip_stream)

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:
        """Each session given an inbox entry or handed over, by any process,
        as PostgreSQL's LISTEN/NOTIFY delivers them (see ``journal.store``)."""
        self._check_open()
        async for payload in self._reading.notifications(self._inbox_channel):
            yield wakeup_of(payload)

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """``read``, then follow appends (from any process) until the journal closes.

        Holds one listening connection while it runs; wakes on commit
        notifications, never on a timer.
        """
        return self._reading.tail(session, after=after)

    async def head(self, session: str) -> int:
        self._check_open()
        return await self._reading.head(session)

    async def checkpoints(self, session: str) -> list[Record]:
        """The session's ``session.checkpoint`` records, in seq order, from the index.

        One query, whatever the session's length; each is verified against
        the stored digest of the record before it (``JournalCorruptError``).
        """
        self._check_open()
        return await self._reading.checkpoints(session)

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        """``checkpoints`` and the records after the last one, in one
        statement (``Journal.read_checkpointed``)."""
        check_tail_limit(tail_limit)
        self._check_open()
        return await self._reading.read_checkpointed(session, tail_limit)

    async def sessions(self) -> list[SessionInfo]:
        """Every session, oldest first."""
        self._check_open()
        return await self._reading.sessions()

    async def writers(self, session: str) -> list[WriterSpan]:
        """Who appended the session's records (``Journal.writers``), in seq
        order; ``SessionNotFoundError`` if the session does not exist."""
        self._check_open()
        return await self._reading.writers(session)

    async def check_storage(self) -> StorageCheck:
        """Every session row against its last record (head and digest), and,
        when the ``amcheck`` extension is installed in the database, its heap
        and B-tree checks of the journal's tables.  Never writes."""
        self._check_open()
        return await self._reading.check_storage()

    async def aclose(self) -> None:
        """Close the journal: wait for a commit in flight, then close every connection.

        Appends still waiting for a group commit fail with
        ``JournalClosedError``; tails end.  Idempotent.
        """
        if self._closed:
            return
        self._closed = self._commits.closed = self._reading.closed = True
        self._reading.end_tails()
        # The commit in flight decides its appends' outcomes; let it finish.
        await self._commits.aclose()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._pool.close)
            await trio.to_thread.run_sync(self._renewals.close)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self._where} is closed")
