"""ForwardingJournal: a journal that passes every call to another one.

Subclass it to observe or intercept appends without re-implementing the
protocol: time them (benchmarks), fail one (tests of a journal failure), or
stop the process at a chosen commit (crash-point tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from .errors import LeaseHeldError, SessionNotFoundError
from .inbox import Claim, Consumed, InboxCommand, InboxEntry, Wakeup
from .record import Draft, Record
from .store import (
    TAIL_LIMIT,
    Checkpointed,
    HostInfo,
    Journal,
    SessionInfo,
    SessionLease,
    StorageCheck,
    WriterSpan,
)

__all__ = ["ForwardingJournal"]


class ForwardingJournal:
    """Every call goes to ``inner``; override what you need."""

    def __init__(self, inner: Journal) -> None:
        self.inner = inner
        self.url = inner.url

    async def open_session(self, session: str, *, create: bool = True) -> SessionLease:
        return await self.inner.open_session(session, create=create)

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Consumed] = (),
    ) -> list[Record]:
        return await self.inner.append(lease, drafts, expected_seq=expected_seq, consumes=consumes)

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        return await self.inner.acquire(
            session, owner, ttl=ttl, create=create, definition=definition
        )

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        return await self.inner.acquire_all(sessions, owner, ttl=ttl)

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease:
        return await self.inner.renew(lease, ttl=ttl)

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        return await self.inner.renew_all(leases, ttl=ttl)

    async def release(
        self, lease: SessionLease, *, handoff: bool = False, definition: str | None = None
    ) -> None:
        await self.inner.release(lease, handoff=handoff, definition=definition)

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        return await self.inner.put(session, key, command, definition=definition)

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        return await self.inner.inbox(session, after=after)

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        return await self.inner.entry(session, key)

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        return await self.inner.claimable(definitions=definitions, owner=owner, limit=limit)

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        return await self.inner.register_host(host, token, ttl=ttl, definitions=definitions)

    async def deregister_host(self, host: str, token: str) -> None:
        await self.inner.deregister_host(host, token)

    async def hosts(self) -> list[HostInfo]:
        return await self.inner.hosts()

    def inbox_wakeups(self) -> AsyncIterator[Wakeup]:
        return self.inner.inbox_wakeups()

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        return self.inner.read(session, after=after, skip_stream=skip_stream)

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        return self.inner.tail(session, after=after)

    async def head(self, session: str) -> int:
        return await self.inner.head(session)

    async def checkpoints(self, session: str) -> list[Record]:
        return await self.inner.checkpoints(session)

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        return await self.inner.read_checkpointed(session, tail_limit=tail_limit)

    async def sessions(self) -> list[SessionInfo]:
        return await self.inner.sessions()

    async def writers(self, session: str) -> list[WriterSpan]:
        return await self.inner.writers(session)

    async def check_storage(self) -> StorageCheck:
        return await self.inner.check_storage()

    async def aclose(self) -> None:
        await self.inner.aclose()
