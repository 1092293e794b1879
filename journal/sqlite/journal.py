"""SQLite journal: the embedded default backend (``sqlite:///path/to/file.db``).

``SQLiteJournal`` is the facade: it checks and encodes each call on the trio
thread, hands writes to the writer thread (``writer.py``) and reads to the
reader pool (``reading.py``).  The file, its schema and the translation of
sqlite3's errors are ``schema.py``.  URL options, durability and the group
commit are described in ``docs/journal.md``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from ..blobs import DEFAULT_BLOB_THRESHOLD, check_threshold, choose_threshold, encode_pending
from ..errors import (
    DuplicateEventError,
    JournalClosedError,
    JournalReadOnlyError,
    LeaseHeldError,
    SessionNotFoundError,
)
from ..inbox import (
    MAX_ENTRY_BYTES,
    Claim,
    Consumed,
    InboxCommand,
    InboxEntry,
    Wakeup,
    encode_command,
    encode_outcome,
)
from ..location import JournalLocation, parse_location
from ..record import Draft, Record, check_drafts, check_text
from ..rules import repeated_id, ttl_ns
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
from .reading import Reading, entry_of
from .schema import (
    Access,
    check_existing_file,
    check_readable_version,
    host_table_stand_ins,
    prepare,
    reader_stand_ins,
)
from .wal import reserve_for
from .writer import (
    AppendRequest,
    HostRequest,
    LeaseRequest,
    OpenRequest,
    PutRequest,
    RenewalsRequest,
    Request,
    SQLiteStatistics,
    TakesRequest,
    Writer,
)
from .writers import SELECT_WRITERS, spans_of

__all__ = ["SQLiteJournal"]


def _refuse_abort(_: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


class SQLiteJournal:
    """A journal in one SQLite file.  Open it with ``open_journal("sqlite:///x.db")``.

    Bound to the trio run that opened it.  Several processes may open the same
    file: writes are serialised by SQLite's lock and fenced by incarnations,
    and each process's tails see the others' appends within ``poll`` seconds.
    """

    def __init__(
        self,
        location: JournalLocation,
        writer_conn: sqlite3.Connection | None,
        access: Access = "write",
        stand_ins: tuple[str, ...] = (),
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
    ) -> None:
        """``writer_conn`` None: opened read-only (``access`` says how readers
        connect, ``stand_ins`` how they read an older schema)."""
        assert location.path is not None
        self.url = location.url
        self.blob_threshold = check_threshold(blob_threshold)
        self.max_entry_bytes = location.max_entry_bytes or MAX_ENTRY_BYTES
        self.path = location.path
        self.synchronous = location.synchronous
        self.poll = location.poll
        self._closed = False
        self._outbox: list[Request] = []
        # Trio-thread bookkeeping for the flush policy in _submit.
        self._in_flight = 0
        self._last_group = 0
        self._token = trio.lowlevel.current_trio_token()
        self._reading = Reading(
            self.url, self.path, self.synchronous, self.poll, self._token, access, stand_ins
        )
        self._writer: Writer | None = None
        if writer_conn is not None:
            # At FULL every commit syncs the WAL; room written ahead keeps
            # that sync from also syncing the file's growth (wal.py).
            reserve = reserve_for(self.path, self.synchronous)
            self._writer = Writer(writer_conn, self.path, self._deliver, self._token, reserve)
            self._writer.thread.start()

    @classmethod
    async def open(
        cls, url: str, *, readonly: bool = False, blob_threshold: int | None = None
    ) -> SQLiteJournal:
        """Open (or create, mode 0600) the journal file named by ``url``.

        With ``readonly`` nothing is created or written, not even by SQLite
        (no writer thread; writes raise ``JournalReadOnlyError``); a file on a
        read-only file system is read too.  Raises ``NotAJournalError`` for a
        file that is not a SQLite database or a database that is not a journal
        (with ``readonly``: also for a missing or empty file),
        ``JournalSchemaError`` for a journal written by a newer schema,
        ``ValueError`` for a malformed URL or a ``blob_threshold`` that is not a
        positive number of bytes or differs from the URL's (``journal.blobs``;
        None takes the URL's, else the default).
        """
        location = parse_location(url)
        if location.scheme != "sqlite":
            raise ValueError(f"{url!r} is not a sqlite: journal URL")
        blob_threshold = choose_threshold(blob_threshold, location.blob_threshold, url)
        assert location.path is not None
        if readonly:
            access = await trio.to_thread.run_sync(check_existing_file, location.path)
            version = await trio.to_thread.run_sync(check_readable_version, location.path, access)
            extra = await trio.to_thread.run_sync(host_table_stand_ins, location.path, access)
            return cls(location, None, access, reader_stand_ins(version) + extra, blob_threshold)
        conn = await trio.to_thread.run_sync(prepare, location.path, location.synchronous)
        return cls(location, conn, blob_threshold=blob_threshold)

    # -- writing --------------------------------------------------------------

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        """Take the writer lease of ``session``, fencing every older lease.

        Creates the session when ``create`` (else ``SessionNotFoundError``).
        Durable on return; once submitted it is not withdrawn by cancellation.
        """
        self._check_open()
        check_text("session id", session)
        result: SessionLease = await self._submit(OpenRequest(session, create))
        return result

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        """Take the session's lease for ``owner`` (see ``journal.store``); durable on return."""
        self._check_open()
        check_text("session id", session)
        check_text("owner", owner)
        check_text("definition", definition)
        request = LeaseRequest(
            session, "acquire", owner=owner, ttl=ttl_ns(ttl), create=create, definition=definition
        )
        result: SessionLease = await self._submit(request)
        return result

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        """Take ``sessions`` for ``owner`` in one transaction (see ``journal.store``);
        durable on return."""
        self._check_open()
        for session in sessions:
            check_text("session id", session)
        check_text("owner", owner)
        span = ttl_ns(ttl)
        if not sessions:
            return []
        result: list[SessionLease | LeaseHeldError | SessionNotFoundError] = await self._submit(
            TakesRequest(list(sessions), owner, span)
        )
        return result

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease:
        self._check_open()
        check_text("session id", lease.session)
        request = LeaseRequest(
            lease.session,
            "renew",
            owner=lease.owner,
            ttl=ttl_ns(ttl),
            incarnation=lease.incarnation,
        )
        result: SessionLease = await self._submit(request)
        return result

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        """Renew ``leases`` in one transaction (see ``journal.store``); durable on return."""
        self._check_open()
        for lease in leases:
            check_text("session id", lease.session)
        span = ttl_ns(ttl)
        if not leases:
            return []
        wanted = [(lease.session, lease.incarnation, lease.owner) for lease in leases]
        result: list[SessionLease | None] = await self._submit(RenewalsRequest(wanted, span))
        return result

    async def release(
        self, lease: SessionLease, *, handoff: bool = False, definition: str | None = None
    ) -> None:
        self._check_open()
        check_text("session id", lease.session)
        check_text("definition", definition)
        await self._submit(
            LeaseRequest(
                lease.session,
                "release",
                incarnation=lease.incarnation,
                handoff=handoff,
                definition=definition,
            )
        )

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        """Store ``command`` in the session's inbox under ``key`` (see ``journal.store``)."""
        self._check_open()
        check_text("session id", session)
        check_text("key", key)
        check_text("definition", definition)
        body = encode_command(command, session, self.max_entry_bytes)
        row = await self._submit(PutRequest(session, key, body, definition))
        return entry_of(session, row)

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        """The entries not yet applied, in order (after entry number ``after``)."""
        self._check_open()
        return await self._reading.inbox(session, after)

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        self._check_open()
        return await self._reading.entry(session, key)

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        self._check_open()
        return await self._reading.claimable(list(definitions), owner, limit)

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        """Register ``host`` for ``token`` (see ``journal.store``); durable on return."""
        self._check_open()
        check_text("host id", host)
        check_text("token", token)
        names = tuple(definitions)
        for name in names:
            check_text("definition", name)
        expires_at: int = await self._submit(HostRequest(host, token, names, ttl_ns(ttl)))
        return expires_at

    async def deregister_host(self, host: str, token: str) -> None:
        self._check_open()
        check_text("host id", host)
        await self._submit(HostRequest(host, token, (), 0))

    async def hosts(self) -> list[HostInfo]:
        self._check_open()
        return await self._reading.hosts()

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:
        """Only the first (no session): processes sharing a file have no channel
        to tell each other of a put; hosts on SQLite find work by polling."""
        self._check_open()
        yield Wakeup(session="")
        await trio.sleep_forever()

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
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
            repeated = repeated_id([d.id for d in drafts])
            if repeated is not None:
                raise DuplicateEventError(lease.session, repeated)
        check_drafts(drafts)
        pending, blobs = encode_pending(drafts, self.blob_threshold)
        marks = [(c.entry, encode_outcome(c.outcome)) for c in consumes] if consumes else None
        result: list[Record] = await self._submit(
            AppendRequest(lease, pending, expected_seq, marks, blobs or None)
        )
        return result

    async def _submit(self, request: Request) -> Any:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if self._writer is None:
            raise JournalReadOnlyError(
                f"journal {self.url} was opened read-only; open it without readonly=True to write"
            )
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
                # going alone and the rest one commit (one fsync) later.  This
                # task lets them run by yielding once (a callback to itself
                # through the trio token would cost trio's entry queue a
                # wake-up, and its socket two system calls, per group).
                # Cancellation cannot come between here and the park: the
                # request is queued, and the writer always answers it.
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._flush_outbox()
        # Not abortable: the writer always answers (aclose drains the queue
        # first), and a committed append must not be reported as cancelled.
        # Cancellation takes effect at the caller's next checkpoint.  _deliver
        # wakes this task with the writer's outcome, unwrapped here.
        return await trio.lowlevel.wait_task_rescheduled(_refuse_abort)

    def _flush_outbox(self) -> None:
        if self._outbox and self._writer is not None:
            group, self._outbox = self._outbox, []
            self._in_flight += len(group)
            self._writer.queue.put(group)

    def _deliver(self, group: list[Request], changed: set[str]) -> None:
        """Runs on the trio thread: wake each waiting caller, then the tails."""
        self._in_flight -= len(group)
        self._last_group = len(group)
        reschedule = trio.lowlevel.reschedule
        for request in group:
            assert request.result is not None
            reschedule(request.task, request.result)
        self._reading.wake(changed)

    # -- reading --------------------------------------------------------------

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        """Yield the records after seq ``after`` in order, verifying the digest chain.

        A damaged record raises ``JournalCorruptError`` (with its seq) after
        every good record before it was yielded.  ``SessionNotFoundError`` if
        the session does not exist.  Sees what was committed when each batch was
        fetched.  The records of ``skip_stream`` are verified but neither
        decoded nor yielded.
        """
        self._check_open()
        return self._reading.follow(session, after, follow=False, skip_stream=skip_stream)

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        """``read``, then follow later appends until the journal is closed.

        Appends through this object wake it at once; appends by other processes
        are found by polling every ``poll`` seconds.
        """
        self._check_open()
        return self._reading.follow(session, after, follow=True)

    async def head(self, session: str) -> int:
        """The session's last seq (0 if it has no records); ``SessionNotFoundError``."""
        self._check_open()
        return await self._reading.head(session)

    async def checkpoints(self, session: str) -> list[Record]:
        """The session's ``session.checkpoint`` records in seq order, from the index.

        Each is verified against the stored digest of the record before it: a
        damaged one is a ``JournalCorruptError`` with its seq.
        ``SessionNotFoundError`` if the session does not exist.  Sees what was
        committed when it was called; the caller owns the returned list.
        """
        self._check_open()
        return await self._reading.checkpoints(session)

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        """``checkpoints`` and the records after the last one, in one read
        of one snapshot (``Journal.read_checkpointed``)."""
        check_tail_limit(tail_limit)
        self._check_open()
        return await self._reading.read_checkpointed(session, tail_limit)

    async def sessions(self) -> list[SessionInfo]:
        """Every session, in creation order."""
        self._check_open()
        return await self._reading.sessions()

    async def writers(self, session: str) -> list[WriterSpan]:
        """Who appended the session's records (``Journal.writers``), in seq
        order; ``SessionNotFoundError`` if the session does not exist."""
        self._check_open()
        doing = f"reading the writers of session {session}"
        rows = await trio.to_thread.run_sync(
            self._reading.query, session, doing, SELECT_WRITERS, (session,)
        )
        return spans_of(rows)

    async def check_storage(self) -> StorageCheck:
        """SQLite's quick check of the whole file (every page of every table and
        index), run by a reader; when it finds damage, the check is repeated
        table by table so each problem names its table.  Never writes."""
        self._check_open()
        return await self._reading.check_storage()

    def statistics(self) -> SQLiteStatistics:
        """How many transactions the writer ran and how many writes they carried."""
        writer = self._writer
        if writer is None:
            return SQLiteStatistics(transactions=0, requests=0, largest_group=0)
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
        self._closed = self._reading.closed = True
        writer = self._writer
        if writer is not None:
            self._flush_outbox()
            writer.queue.put(None)
            # Shielded: the writer must be joined (and its connection closed)
            # even when the closer is being cancelled, or the file stays locked.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(writer.thread.join)
        self._reading.close()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")
