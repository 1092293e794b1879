"""Riding out a journal that is briefly unreachable: journals whose reads
retry under a policy (``journal.backoff``).

Rules: only a ``JournalUnavailableError`` (``retryable``) is retried; a
refusal never is.  Pauses grow exponentially up to a cap, each drawn at
random below its ceiling (full jitter, so many readers that lost the same
server do not come back in step), and their sum is bounded
(``RetryPolicy.bound``): past it the error is raised, saying how long it was
tried.  A read that stops midway resumes after the last record it yielded,
so no record is repeated or skipped.  A put is not retried here: it raises
``InboxUnavailableError``, retryable, and the caller sends it again under
the same key (the PostgreSQL backend retries it once itself, on a new
connection).  Writes of a session (appends, leases) pass through untouched:
their retries are the session's and the host's business.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from .backoff import READ_RETRIES, Retrying, RetryPolicy
from .blocking import BlockingJournal
from .errors import InboxUnavailableError, JournalUnavailableError
from .forwarding import ForwardingJournal
from .inbox import Claim, InboxCommand, InboxEntry
from .record import Record
from .store import (
    TAIL_LIMIT,
    Checkpointed,
    HostInfo,
    Journal,
    SessionInfo,
    StorageCheck,
    WriterSpan,
)

__all__ = ["RetryingBlocking", "RetryingJournal"]

_T = TypeVar("_T")


async def _retried(policy: RetryPolicy, call: Callable[[], Awaitable[_T]]) -> _T:
    tries = Retrying(policy, trio.current_time)
    while True:
        try:
            return await call()
        except JournalUnavailableError as exc:
            pause = tries.pause()
            if pause is None:
                raise tries.exhausted(exc) from exc
        await trio.sleep(pause)


def _retried_blocking(policy: RetryPolicy, call: Callable[[], _T]) -> _T:
    tries = Retrying(policy)
    while True:
        try:
            return call()
        except JournalUnavailableError as exc:
            pause = tries.pause()
            if pause is None:
                raise tries.exhausted(exc) from exc
        time.sleep(pause)


class RetryingJournal(ForwardingJournal):
    """``inner`` (a trio journal) with every read retried under ``policy``
    and a put that fails to reach it raised as ``InboxUnavailableError``.

    ``read`` and ``tail`` resume after the last record they yielded; a record
    yielded resets the attempts.  Everything else passes through."""

    def __init__(self, inner: Journal, policy: RetryPolicy = READ_RETRIES) -> None:
        super().__init__(inner)
        self.policy = policy

    async def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        try:
            return await self.inner.put(session, key, command, definition=definition)
        except JournalUnavailableError as exc:
            raise InboxUnavailableError(session, key, str(exc)) from exc

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        return await _retried(self.policy, lambda: self.inner.inbox(session, after=after))

    async def entry(self, session: str, key: str) -> InboxEntry | None:
        return await _retried(self.policy, lambda: self.inner.entry(session, key))

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        return await _retried(
            self.policy,
            lambda: self.inner.claimable(definitions=definitions, owner=owner, limit=limit),
        )

    async def hosts(self) -> list[HostInfo]:
        return await _retried(self.policy, self.inner.hosts)

    async def head(self, session: str) -> int:
        return await _retried(self.policy, lambda: self.inner.head(session))

    async def checkpoints(self, session: str) -> list[Record]:
        return await _retried(self.policy, lambda: self.inner.checkpoints(session))

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        return await _retried(
            self.policy, lambda: self.inner.read_checkpointed(session, tail_limit=tail_limit)
        )

    async def sessions(self) -> list[SessionInfo]:
        return await _retried(self.policy, self.inner.sessions)

    async def writers(self, session: str) -> list[WriterSpan]:
        return await _retried(self.policy, lambda: self.inner.writers(session))

    async def check_storage(self) -> StorageCheck:
        return await _retried(self.policy, self.inner.check_storage)

    def read(
        self, session: str, *, after: int = 0, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        return self._resumed(session, after, follow=False, skip_stream=skip_stream)

    def tail(self, session: str, *, after: int = 0) -> AsyncIterator[Record]:
        return self._resumed(session, after, follow=True)

    async def _resumed(
        self, session: str, after: int, *, follow: bool, skip_stream: str | None = None
    ) -> AsyncIterator[Record]:
        tries = Retrying(self.policy, trio.current_time)
        while True:
            records = (
                self.inner.tail(session, after=after)
                if follow
                else self.inner.read(session, after=after, skip_stream=skip_stream)
            )
            aclose = getattr(records, "aclose", None)
            try:
                async for record in records:
                    yield record
                    after = record.seq
                    tries = Retrying(self.policy, trio.current_time)
                return
            except JournalUnavailableError as exc:
                pause = tries.pause()
                if pause is None:
                    raise tries.exhausted(exc) from exc
            finally:
                # A reader that stops early closes this generator: close the
                # backend's read now rather than when it is collected.
                if aclose is not None:
                    await aclose()
            await trio.sleep(pause)


class RetryingBlocking:
    """A ``BlockingJournal`` whose reads retry under ``policy`` (sleeping in
    the calling thread) and whose put that fails to reach the journal raises
    ``InboxUnavailableError``."""

    def __init__(self, inner: BlockingJournal, policy: RetryPolicy = READ_RETRIES) -> None:
        self.inner, self.policy, self.url = inner, policy, inner.url

    def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        try:
            return self.inner.put(session, key, command, definition=definition)
        except JournalUnavailableError as exc:
            raise InboxUnavailableError(session, key, str(exc)) from exc

    def entry(self, session: str, key: str) -> InboxEntry | None:
        return _retried_blocking(self.policy, lambda: self.inner.entry(session, key))

    def read(self, session: str, *, after: int = 0, limit: int = 512) -> list[Record]:
        return _retried_blocking(
            self.policy, lambda: self.inner.read(session, after=after, limit=limit)
        )

    def sessions(self) -> list[SessionInfo]:
        return _retried_blocking(self.policy, self.inner.sessions)

    def hosts(self) -> list[HostInfo]:
        return _retried_blocking(self.policy, self.inner.hosts)

    def close(self) -> None:
        self.inner.close()
