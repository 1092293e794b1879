"""In-memory journal: the reference backend for tests and benchmarks.

It stores the same encoded bytes and rows as the durable backends (so the
codec, the digest chain and ``journal.rules`` are exercised), but nothing
survives the process.  Every append is decided in full by
``rules.decide_append``: this is the plainest reading of the contract.

The module is one piece: it is the whole ``Journal`` protocol over one table
of sessions, each method a few lines of rules applied to it; split, every
part would reach into the same private rows.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence

import trio

from .blobs import DEFAULT_BLOB_THRESHOLD, check_threshold, encode_pending, is_split, join
from .codec import GENESIS, chain, checkpoint_records, decode_event, verified_records
from .errors import (
    DuplicateEventError,
    FencedError,
    JournalClosedError,
    JournalCorruptError,
    LeaseHeldError,
    SessionNotFoundError,
)
from .inbox import (
    Claim,
    Consumed,
    InboxCommand,
    InboxEntry,
    Wakeup,
    decode_entry,
    decode_outcome,
    encode_command,
    encode_outcome,
    entry_limit,
)
from .record import Draft, Record, check_drafts, check_text
from .rules import (
    LeaseState,
    Mark,
    Row,
    check_lease,
    decide_acquire,
    decide_append,
    decide_consumes,
    decide_open,
    decide_put,
    decide_register,
    decide_release,
    decide_renew,
    lease_live,
    live_holder,
    repeated_id,
    starts_span,
    ttl_ns,
)
from .store import (
    TAIL_LIMIT,
    Checkpointed,
    HostInfo,
    SessionInfo,
    SessionLease,
    StorageCheck,
    WriterSpan,
    check_tail_limit,
)

__all__ = ["MemoryJournal"]


class _Session:
    __slots__ = (
        "by_id",
        "changed",
        "checkpoints",
        "created_at",
        "definition",
        "entries",
        "expires_at",
        "incarnation",
        "keys",
        "owner",
        "rows",
        "updated_at",
        "writers",
    )

    def __init__(self, now: int) -> None:
        self.rows: list[Row] = []
        """Record ``seq`` is ``rows[seq - 1]``."""
        self.by_id: dict[str, int] = {}
        self.checkpoints: list[int] = []
        """seqs of the session's ``session.checkpoint`` records."""
        self.writers: list[WriterSpan] = []
        self.incarnation = 0
        self.owner: str | None = None
        self.expires_at = 0
        self.definition: str | None = None
        self.entries: list[_Entry] = []
        """Inbox entry ``n`` is ``entries[n - 1]``."""
        self.keys: dict[str, int] = {}
        self.created_at = self.updated_at = now
        self.changed = trio.Event()

    @property
    def lease(self) -> LeaseState:
        return (self.incarnation, self.owner, self.expires_at)

    @lease.setter
    def lease(self, state: LeaseState) -> None:
        self.incarnation, self.owner, self.expires_at = state

    def pending(self) -> int:
        return sum(1 for e in self.entries if e.consumed_at is None)


class _Entry:
    __slots__ = ("body", "consumed_at", "created_at", "key", "outcome")

    def __init__(self, key: str, body: bytes, now: int) -> None:
        self.key, self.body, self.created_at = key, body, now
        self.consumed_at: int | None = None
        self.outcome: bytes | None = None


class MemoryJournal:
    """Journal kept in process memory (``memory:``).

    ``clock`` (unix ns) times leases: tests pass one that follows trio's clock
    so that leases expire in virtual time."""

    def __init__(
        self,
        url: str = "memory:",
        *,
        clock: Callable[[], int] = time.time_ns,
        blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
    ) -> None:
        self.url = url
        self.clock = clock
        self.blob_threshold = check_threshold(blob_threshold)
        self.max_entry_bytes = entry_limit(url)
        self._blobs: dict[bytes, bytes] = {}
        """The blob table (``journal.blobs``): digest -> bytes, shared by every session."""
        self._sessions: dict[str, _Session] = {}
        self._hosts: dict[str, tuple[str, tuple[str, ...], int]] = {}
        """Registered hosts: id -> (token, definitions, expires_at)."""
        self._wakeups: set[trio.MemorySendChannel[Wakeup]] = set()
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
        s.lease = decide_open(session, s.lease, self.clock())
        return SessionLease(session=session, incarnation=s.incarnation, head=len(s.rows))

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        self._check_open()
        check_text("session id", session)
        check_text("owner", owner)
        span = ttl_ns(ttl)
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            if not create:
                raise SessionNotFoundError(session)
            s = self._sessions[session] = _Session(time.time_ns())
        s.lease = decide_acquire(session, owner, s.lease, self.clock(), span)
        if definition is not None:
            s.definition = definition
        return self._lease(session, s)

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        self._check_open()
        for session in sessions:
            check_text("session id", session)
        check_text("owner", owner)
        span = ttl_ns(ttl)
        await trio.lowlevel.checkpoint()
        now = self.clock()
        taken: list[SessionLease | LeaseHeldError | SessionNotFoundError] = []
        for session in sessions:
            s = self._sessions.get(session)
            try:
                if s is None:
                    raise SessionNotFoundError(session)
                s.lease = decide_acquire(session, owner, s.lease, now, span)
            except (LeaseHeldError, SessionNotFoundError) as exc:
                taken.append(exc)
                continue
            taken.append(self._lease(session, s))
        return taken

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease:
        self._check_open()
        span = ttl_ns(ttl)
        await trio.lowlevel.checkpoint()
        s = self._session(lease.session)
        s.lease = decide_renew(
            lease.session, lease.incarnation, lease.owner, s.lease, self.clock(), span
        )
        return self._lease(lease.session, s)

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        self._check_open()
        span = ttl_ns(ttl)
        await trio.lowlevel.checkpoint()
        now = self.clock()
        renewed: list[SessionLease | None] = []
        for lease in leases:
            s = self._sessions.get(lease.session)
            try:
                if s is None:
                    raise SessionNotFoundError(lease.session)
                s.lease = decide_renew(
                    lease.session, lease.incarnation, lease.owner, s.lease, now, span
                )
            except (FencedError, SessionNotFoundError):
                renewed.append(None)
                continue
            renewed.append(self._lease(lease.session, s))
        return renewed

    async def release(
        self, lease: SessionLease, *, handoff: bool = False, definition: str | None = None
    ) -> None:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._session(lease.session)
        s.lease = decide_release(lease.session, lease.incarnation, s.lease, handoff)
        if definition is not None:
            s.definition = definition
        if handoff:
            self._wake(Wakeup(session=lease.session))

    def _lease(self, session: str, s: _Session) -> SessionLease:
        return SessionLease(
            session=session,
            incarnation=s.incarnation,
            head=len(s.rows),
            owner=s.owner,
            expires_at=s.expires_at,
        )

    def _session(self, session: str) -> _Session:
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        return s

    # -- the inbox ---------------------------------------------------------------

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        self._check_open()
        check_text("session id", session)
        check_text("key", key)
        body = encode_command(command, session, self.max_entry_bytes)
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            if definition is None:
                raise SessionNotFoundError(session)
            s = self._sessions[session] = _Session(time.time_ns())
            s.definition = definition
        stored = s.keys.get(key)
        number = decide_put(
            session, key, body, (stored, s.entries[stored - 1].body) if stored else None
        )
        if number is None:
            s.entries.append(_Entry(key, body, time.time_ns()))
            number = s.keys[key] = len(s.entries)
            self._wake(Wakeup(session=session, holder=live_holder(s.lease, self.clock())))
        return _entry(session, number, s.entries[number - 1])

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        self._check_open()
        check_text("host id", host)
        check_text("token", token)
        names = tuple(definitions)
        for name in names:
            check_text("definition", name)
        await trio.lowlevel.checkpoint()
        stored = self._hosts.get(host)
        expires_at = decide_register(
            host, token, (stored[0], stored[2]) if stored else None, self.clock(), ttl_ns(ttl)
        )
        self._hosts[host] = (token, names, expires_at)
        return expires_at

    async def deregister_host(self, host: str, token: str) -> None:
        self._check_open()
        await trio.lowlevel.checkpoint()
        stored = self._hosts.get(host)
        if stored is not None and stored[0] == token:
            del self._hosts[host]

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:
        self._check_open()
        send, receive = trio.open_memory_channel[Wakeup](64)
        self._wakeups.add(send)
        try:
            yield Wakeup(session="")
            async with receive:
                async for wakeup in receive:
                    yield wakeup
        finally:
            self._wakeups.discard(send)

    def _wake(self, wakeup: Wakeup) -> None:
        for send in list(self._wakeups):
            try:
                send.send_nowait(wakeup)
            except trio.WouldBlock:
                pass  # a wake-up is a hint: the host's poll finds the work anyway
            except trio.BrokenResourceError:
                self._wakeups.discard(send)

    async def hosts(self) -> list[HostInfo]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        now = self.clock()
        return [
            HostInfo(host=host, definitions=names, expires_at=expires, live=expires > now)
            for host, (_, names, expires) in sorted(self._hosts.items())
        ]

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._session(session)
        return [
            _entry(session, n, e)
            for n, e in enumerate(s.entries[max(after, 0) :], max(after, 0) + 1)
            if e.consumed_at is None
        ]

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._session(session)
        number = s.keys.get(key)
        return None if number is None else _entry(session, number, s.entries[number - 1])

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        now = self.clock()
        found: list[Claim] = []
        for name, s in self._sessions.items():
            if len(found) >= limit:
                break
            if s.definition is not None and s.definition not in definitions:
                continue
            pending = s.pending()
            live = lease_live(s.lease, now)
            mine = live and owner is not None and s.owner == owner
            if (pending and (not live or mine)) or (s.owner is not None and not live):
                found.append(
                    Claim(
                        session=name,
                        owner=s.owner,
                        expires_at=s.expires_at,
                        pending=pending,
                        definition=s.definition,
                    )
                )
        return found

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
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
        pending, blobs = encode_pending(drafts, self.blob_threshold)
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
        if consumes:
            wanted = [(c.entry, encode_outcome(c.outcome)) for c in consumes]
            entries = s.entries
            found = [
                (entries[n - 1].consumed_at is not None, entries[n - 1].outcome)
                if 0 < n <= len(entries)
                else None
                for n, _ in wanted
            ]
            for number, outcome in decide_consumes(lease.session, wanted, found):
                entry = entries[number - 1]
                entry.consumed_at, entry.outcome = now, outcome
        if not fresh:
            return records
        self._blobs.update(blobs)
        for row in new:
            rows.append(row)
            by_id[row[2]] = row[1]
        s.checkpoints.extend(seq for _, seq in marks)
        last = s.writers[-1].incarnation if s.writers else None
        if new and starts_span(last, lease.incarnation):
            s.writers.append(
                WriterSpan(first_seq=new[0][1], incarnation=lease.incarnation, owner=lease.owner)
            )
        s.updated_at = now
        s.changed.set()
        s.changed = trio.Event()
        return records

    # -- reading --------------------------------------------------------------

    def _record(self, row: Row) -> Record:
        session, seq, id, loop, at, cause, digest, body = row
        if is_split(body):
            body = join(session, seq, body, self._blobs)
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

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        # The generator itself, not one wrapped in another: a record passes
        # through one frame.  Its checks still run when iteration starts.
        return self._read_from(session, None, after, skip_stream)

    async def _read_from(
        self, session: str, s: _Session | None, after: int, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        if s is None:
            self._check_open()
            s = self._sessions.get(session)
            if s is None:
                raise SessionNotFoundError(session)
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
            if loop != skip_stream:
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
        return self._checkpoints_of(session, s)

    def _checkpoints_of(self, session: str, s: _Session) -> list[Record]:
        rows = s.rows
        stored = []
        for seq in s.checkpoints:
            _, _, id, loop, at, cause, digest, body = rows[seq - 1]
            previous = rows[seq - 2][6] if seq > 1 else None
            stored.append((seq, id, loop, at, cause, digest, body, previous))
        return checkpoint_records(session, stored, resolve=self._resolver(session))

    def _resolver(self, session: str) -> Callable[[int, bytes], bytes]:
        return lambda seq, body: join(session, seq, body, self._blobs)

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        check_tail_limit(tail_limit)
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        checkpoints = self._checkpoints_of(session, s)
        after = checkpoints[-1].seq if checkpoints else 0
        previous = checkpoints[-1].digest if checkpoints else GENESIS
        tail = verified_records(
            session,
            (row[1:] for row in s.rows[after : after + tail_limit]),
            after=after,
            previous=previous,
            resolve=self._resolver(session),
        )
        return Checkpointed(checkpoints=checkpoints, tail=list(tail), head=len(s.rows))

    async def sessions(self) -> list[SessionInfo]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        now = self.clock()
        return [
            SessionInfo(
                session=name,
                head=len(s.rows),
                incarnation=s.incarnation,
                created_at=s.created_at,
                updated_at=s.updated_at,
                owner=s.owner,
                expires_at=s.expires_at,
                pending=s.pending(),
                definition=s.definition,
                live=lease_live(s.lease, now),
            )
            for name, s in self._sessions.items()
        ]

    async def writers(self, session: str) -> list[WriterSpan]:
        self._check_open()
        await trio.lowlevel.checkpoint()
        s = self._sessions.get(session)
        if s is None:
            raise SessionNotFoundError(session)
        return list(s.writers)

    async def check_storage(self) -> StorageCheck:
        """Nothing below the rows to check: process memory has no pages to damage."""
        self._check_open()
        await trio.lowlevel.checkpoint()
        return StorageCheck(checked=(), skipped=("memory: no storage below the records",))

    async def aclose(self) -> None:
        self._closed = True
        for s in self._sessions.values():
            s.changed.set()
        for send in self._wakeups:
            send.close()
        self._wakeups.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")


def _entry(session: str, number: int, e: _Entry) -> InboxEntry:
    command, damage = decode_entry(e.body)
    return InboxEntry(
        session=session,
        number=number,
        key=e.key,
        command=command,
        created_at=e.created_at,
        consumed_at=e.consumed_at,
        outcome=decode_outcome(e.outcome) if e.outcome is not None else None,
        damage=damage,
    )
