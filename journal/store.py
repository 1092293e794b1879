"""The Journal protocol every backend implements, and the lease and session values.

The contract (proven for each backend by ``tests/journal/contract.py``; the
append decisions themselves are ``journal.rules``):

* ``open_session`` bumps the session's *incarnation*; appends made through an
  older lease fail with ``FencedError``.
* ``append`` is atomic (all drafts or none), assigns gap-free ``seq`` from
  ``expected_seq + 1``, and returns only once the records are durable.  It is
  atomic under cancellation too: if it raises ``trio.Cancelled``, nothing was
  appended; once the drafts are on their way it finishes and returns.  A stale
  ``expected_seq`` is a ``ConflictError``.  Re-appending drafts whose ids are
  all stored with identical content returns the stored records (idempotent);
  the same id with other content is a ``DuplicateEventError``.  Nothing that
  could not be read back is ever stored: an event holding a value its field's
  type does not allow is an ``InvalidEventError``, and text that is not
  Unicode (a lone surrogate in a session id, event id, loop or cause) a
  ``ValueError``; both fail that call alone, before it is queued.
* ``read`` yields records in seq order, verifying the digest chain; a damaged
  record is a ``JournalCorruptError`` with its seq, after every good record
  before it has been yielded.  With ``skip_stream``, the records of that
  stream are verified on the chain like every other but neither decoded nor
  yielded (a full-fold restore leaves out the checkpoints it would not use).
* ``tail`` is ``read`` that then follows appends made later.
* ``checkpoints`` returns the session's ``session.checkpoint`` records in seq
  order, found through an index the backend keeps as it appends (never by
  scanning the records); each is verified against the stored digest of the
  record before it, so a damaged checkpoint is a ``JournalCorruptError``.
  Restore starts from them and reads only what follows the last one.
* ``read_checkpointed`` is ``checkpoints`` and the records after the last
  one (after seq 0 without one) in one read of one snapshot: the tail is
  verified on the chain from the last checkpoint's digest, so nothing is
  checked twice, and is read only when the session's head is past that
  checkpoint.  It holds at most ``tail_limit`` records; ``complete`` says
  whether they reach the head, and ``read`` gives the rest.  A damaged
  checkpoint or tail record is a ``JournalCorruptError`` with its seq.
* Leases name an owner and an expiry (the journal's clock, unix ns).
  ``acquire`` takes a session for an owner when no other owner's lease is
  live (``LeaseHeldError``), with a new incarnation (so the last holder is
  fenced); ``acquire_all`` takes many for one owner in one transaction, each
  as ``acquire`` would (in order, no ``create``), giving each session's own
  outcome in its place: its lease, or the ``LeaseHeldError`` or
  ``SessionNotFoundError`` that refused it, without failing the others;
  ``renew`` moves the expiry of a lease still current
  (``FencedError`` otherwise); ``renew_all`` renews many in one transaction,
  each as ``renew`` would, giving None in its place for one that is lost
  (fenced, or its session gone) without failing the others; ``release`` ends
  it (bumping the incarnation, so the released lease can write nothing more);
  ``open_session`` refuses a session another owner holds live.  Expiry is
  advice for hosts choosing work; fencing is the guard: an append checks the
  incarnation, never the clock.
* The inbox: ``put`` stores a command under an idempotency key (the same key
  with the same command returns the stored entry; with another command it is
  an ``InboxKeyError``); entries are numbered 1, 2, ... per session.  An
  ``append`` with ``consumes`` marks those entries applied in the same
  transaction as its records, all or nothing: an entry already applied with
  another outcome is an ``InboxConsumedError`` and nothing is appended (with
  the same outcome, a retry, it is left as it is).  ``inbox`` lists the
  entries not yet applied, in order; ``entry`` finds one by key;
  ``claimable`` lists the sessions a host may take: those with entries
  waiting and no live lease, and those whose lease expired.
* Hosts: ``register_host`` records a host id for the process holding
  ``token`` (a value it drew at random) with the definitions it runs, until
  ``ttl`` seconds from now (the journal's clock), and returns that expiry; the
  same token registering again renews it.  Another token's live registration
  of the id is a ``HostIdInUseError`` and changes nothing.
  ``deregister_host`` removes the token's registration (nothing when the id
  is another token's now); ``hosts`` lists every registration.
* ``inbox_wakeups`` yields an ``inbox.Wakeup`` for each session given an
  inbox entry (or handed over by a host's clean stop), from any process, for
  hosts to wake on rather than wait for their next poll; a put's names the
  host whose lease on the session was live then (the journal's clock), if
  any.  It yields one with session ``""`` first, once it watches (nothing
  put after that is missed), and again when some may have been missed.
  Best effort: a backend without a channel between processes (SQLite)
  yields only the first, and its hosts find work by polling.
* Writers: every append is attributed to the lease that made it.
  ``writers`` lists a session's writer spans in seq order: a span starts at
  the first record appended under an incarnation other than the last span's,
  and names that incarnation and the lease's owner (None for a lease of
  ``open_session``).  A record belongs to the last span starting at or before
  its seq; records before the first span were written before the journal
  kept writers, and are unattributed.  An unknown session is a
  ``SessionNotFoundError``.  Fencing makes the incarnations rise
  from span to span; ``replay --check`` proves it.
* ``check_storage`` asks the storage itself whether it is intact (SQLite's
  quick check, PostgreSQL's amcheck where installed, and each backend's own
  bookkeeping); it never writes.  Damage is reported by table, never raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .errors import LeaseHeldError, SessionNotFoundError
from .inbox import Claim, Consumed, InboxCommand, InboxEntry, Wakeup
from .record import Draft, Record

__all__ = [
    "TAIL_LIMIT",
    "Checkpointed",
    "HostInfo",
    "Journal",
    "SessionInfo",
    "SessionLease",
    "StorageCheck",
    "StorageProblem",
    "WriterSpan",
    "check_tail_limit",
]


class SessionLease(msgspec.Struct, frozen=True, kw_only=True):
    """The right to append to one session, until a newer lease is taken."""

    session: str
    incarnation: int
    head: int
    """The session's last seq when the lease was taken."""
    owner: str | None = None
    """Who holds it (a host id); None for a lease taken by ``open_session``."""
    expires_at: int = 0
    """When an owner's lease expires (the journal's clock, unix ns)."""


TAIL_LIMIT = 4096
"""Records ``read_checkpointed`` reads after the last checkpoint by default:
the writer checkpoints every 1,000, so a tail is nearly always whole; a
session without checkpoints gives its first ``TAIL_LIMIT`` records, and
``read`` the rest."""


def check_tail_limit(tail_limit: int) -> None:
    """Refuse a ``tail_limit`` that is not a positive int (``ValueError``)."""
    if not isinstance(tail_limit, int) or isinstance(tail_limit, bool) or tail_limit < 1:
        raise ValueError(f"tail_limit must be a positive number of records, not {tail_limit!r}")


class Checkpointed(msgspec.Struct, frozen=True, kw_only=True):
    """A session's checkpoints and the records after the last one, read
    together (``Journal.read_checkpointed``)."""

    checkpoints: list[Record]
    """The ``session.checkpoint`` records, in seq order (as ``checkpoints``)."""
    tail: list[Record]
    """The records after the last checkpoint (after seq 0 without one), in
    seq order, every one decoded; at most the ``tail_limit`` asked for."""
    head: int
    """The session's last seq in the snapshot read."""

    @property
    def complete(self) -> bool:
        """Whether ``tail`` reaches ``head`` (else ``read`` after its last seq gives the rest)."""
        last = self.tail[-1].seq if self.tail else self.after
        return last >= self.head

    @property
    def after(self) -> int:
        """The seq the tail follows: the last checkpoint's, or 0."""
        return self.checkpoints[-1].seq if self.checkpoints else 0


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    session: str
    head: int
    incarnation: int
    created_at: int
    updated_at: int
    """unix ns of the last append (or creation)."""
    owner: str | None = None
    """The owner of the session's lease (live or expired), if any."""
    expires_at: int = 0
    pending: int = 0
    """Inbox entries not yet applied."""
    definition: str | None = None
    """The definition its hosts run it with, when the inbox or a host said so."""
    live: bool = False
    """Whether ``owner``'s lease was live when the session was listed, judged
    by the clock the journal judges leases by (the server's, on PostgreSQL)."""


class HostInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A host registered in the journal (``Journal.register_host``)."""

    host: str
    definitions: tuple[str, ...]
    """The definitions it runs."""
    expires_at: int
    """When its registration expires unless renewed (the journal's clock, unix ns)."""
    live: bool = False
    """Whether it had not expired when the hosts were listed."""


class WriterSpan(msgspec.Struct, frozen=True, kw_only=True):
    """The records one lease appended to a session, from ``first_seq`` up to
    the next span's first seq (``Journal.writers``)."""

    first_seq: int
    incarnation: int
    """The lease's incarnation: fencing lets no older one append after it."""
    owner: str | None = None
    """The host id that held the lease; None for a lease of ``open_session``."""


class StorageProblem(msgspec.Struct, frozen=True, kw_only=True):
    """Damage the storage reports, and where."""

    table: str | None
    """The damaged table, or None when the damage is in no table (free pages,
    the file's header)."""
    detail: str

    def __str__(self) -> str:
        where = f"table {self.table}" if self.table is not None else "the storage"
        return f"{where}: {self.detail}"


class StorageCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Journal.check_storage`` checked and what it found."""

    checked: tuple[str, ...]
    """What ran, in words (``"SQLite quick_check"``)."""
    skipped: tuple[str, ...] = ()
    """Checks the storage could not afford or offer, and why."""
    problems: tuple[StorageProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


@runtime_checkable
class Journal(Protocol):
    url: str

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease: ...

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
    ) -> list[Record]: ...

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease: ...

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]: ...

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease: ...

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]: ...

    async def release(
        self, lease: SessionLease, *, handoff: bool = False, definition: str | None = None
    ) -> None: ...

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry: ...

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]: ...

    async def entry(self, session: str, key: str) -> InboxEntry | None: ...

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]: ...

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int: ...

    async def deregister_host(self, host: str, token: str) -> None: ...

    async def hosts(self) -> list[HostInfo]: ...

    def inbox_wakeups(self) -> AsyncIterator[Wakeup]: ...

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]: ...

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]: ...

    async def head(self, session: str) -> int: ...

    async def checkpoints(self, session: str) -> list[Record]: ...

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed: ...

    async def sessions(self) -> list[SessionInfo]: ...

    async def writers(self, session: str) -> list[WriterSpan]: ...

    async def check_storage(self) -> StorageCheck: ...

    async def aclose(self) -> None: ...
