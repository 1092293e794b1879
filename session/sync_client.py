"""SyncClient: ``Client``'s commands and reads as blocking calls, for threaded programs.

No event loop anywhere: every call is a blocking call on the journal's
blocking access (``journal.open_blocking``), safe to make from many threads
at once on one client.  Every wait has a bound: ``wait`` takes a timeout
(30 s unless told), and ``subscribe``'s iterator can take one per record.
The commands are built and checked by the same code as ``Client``'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from journal import (
    BlockingJournal,
    JournalClosedError,
    Record,
    RetryingBlocking,
    SessionInfo,
    open_blocking,
)
from journal import inbox as ib
from journal.content import Block, Message, ResultBlock
from loopruntime.host import new_id

from .client import (
    Backoff,
    ClientClosedError,
    ClientNotOpenError,
    CommandRefusedError,
    answer_command,
    check_key,
    check_timeout,
    decide_command,
    resolve_command,
    steer_command,
    submit_command,
    timeout_error,
    with_principal,
)

__all__ = ["SyncClient", "open_sync_client"]

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
"""Seconds ``SyncClient.wait`` waits unless told: a thread never waits unbounded by accident."""


class SyncClient:
    """Blocking twin of ``Client``: ``with open_sync_client(url) as client:``
    (or ``SyncClient.open(url)``), or ``SyncClient(blocking)`` on an open
    ``BlockingJournal`` (its owner closes it).  Safe to share between threads."""

    def __init__(
        self, journal: BlockingJournal | None = None, *, poll: float = 0.05, url: str | None = None
    ) -> None:
        """``SyncClient(journal)`` on an open ``BlockingJournal``, or
        ``SyncClient(url=...)`` (what ``open_sync_client`` makes): opened by ``with``."""
        if (journal is None) == (url is None):
            raise TypeError(
                "a SyncClient needs either an open BlockingJournal (SyncClient(journal)) or a "
                "journal URL (with open_sync_client(url) as client:)"
            )
        self.poll = poll
        self._journal = journal
        self._owned = False
        self._url = journal.url if journal is not None else str(url)
        self._closed = False
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str, *, poll: float = 0.05) -> SyncClient:
        """A client of the journal at ``url``, open now (created when missing);
        close it with ``close()`` or use it as a ``with`` block."""
        client = cls(open_blocking(url), poll=poll)
        client._owned = True
        return client

    @property
    def url(self) -> str:
        return self._url

    def __enter__(self) -> SyncClient:
        with self._lock:
            if self._closed:
                raise ClientClosedError(self.url)
            if self._journal is None:
                self._journal = open_blocking(self._url)
                self._owned = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client (and the journal it opened).  Idempotent; calls
        running in other threads finish, later ones raise ``ClientClosedError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            journal, owned = self._journal, self._owned
        if journal is not None and owned:
            journal.close()

    def _open(self) -> BlockingJournal:
        if self._closed:
            raise ClientClosedError(self.url)
        journal = self._journal
        if journal is None:
            raise ClientNotOpenError(self.url, "with open_sync_client(url) as client:")
        # Reads ride out a briefly unreachable journal; a put that cannot
        # reach it raises InboxUnavailableError, retryable under its key.
        return RetryingBlocking(journal)

    def _run(self, call: Callable[[BlockingJournal], T]) -> T:
        journal = self._open()
        try:
            return call(journal)
        except JournalClosedError as exc:
            # Closed by another thread while this call ran.
            raise ClientClosedError(self.url) from exc

    def _call_put(
        self,
        session: str,
        key: str,
        command: ib.InboxCommand,
        definition: str | None = None,
        *,
        principal: str | None,
    ) -> ib.InboxEntry:
        key = check_key(key)
        command = with_principal(command, principal)
        return self._run(lambda j: j.put(session, key, command, definition=definition))

    # -- commands ------------------------------------------------------------------

    def create(
        self,
        definition_name: str,
        *,
        session_id: str | None = None,
        key: str,
        principal: str | None = None,
    ) -> str:
        session_id = session_id or new_id("ses_")
        self._call_put(
            session_id,
            key,
            ib.Create(definition=definition_name),
            definition_name,
            principal=principal,
        )
        return session_id

    def submit(
        self,
        session_id: str,
        content: str | Message | Sequence[Block],
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(session_id, key, submit_command(content, loop), principal=principal)

    def steer(
        self,
        session_id: str,
        text: str,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(session_id, key, steer_command(text, loop), principal=principal)

    def answer(
        self,
        session_id: str,
        gate_id: str,
        text: str | Any,
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(session_id, key, answer_command(gate_id, text), principal=principal)

    def decide(
        self,
        session_id: str,
        gate_id: str,
        allow: bool,
        scope: str = "once",
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(
            session_id, key, decide_command(gate_id, allow, scope), principal=principal
        )

    def resolve(
        self,
        session_id: str,
        execution_id: str,
        result: str | Sequence[ResultBlock],
        is_error: bool = False,
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(
            session_id, key, resolve_command(execution_id, result, is_error), principal=principal
        )

    def interrupt(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        return self._call_put(session_id, key, ib.Interrupt(loop=loop), principal=principal)

    def cancel_queued(
        self,
        session_id: str,
        input_id: str,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(
            session_id, key, ib.CancelQueued(input_id=input_id, loop=loop), principal=principal
        )

    def compact(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        return self._call_put(session_id, key, ib.Compact(loop=loop), principal=principal)

    def change_mode(
        self,
        session_id: str,
        mode: str | None,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return self._call_put(
            session_id, key, ib.ChangeMode(mode=mode, loop=loop), principal=principal
        )

    # -- reading -------------------------------------------------------------------

    def wait(self, session_id: str, key: str, timeout: float = DEFAULT_TIMEOUT) -> ib.InboxOutcome:
        """``Client.wait``, blocking, bounded by ``timeout`` seconds (never None
        here): ``WaitTimeoutError`` then, saying whether a host holds the session."""
        self._open()
        if timeout is None:
            raise ValueError(
                "SyncClient.wait needs a timeout in seconds: a thread must never wait unbounded"
            )
        limit = check_timeout(timeout)
        deadline = time.monotonic() + limit
        while True:
            entry = self._run(lambda j: j.entry(session_id, key))
            if entry is None:
                raise KeyError(f"session {session_id} has no command with key {key!r}")
            if entry.outcome is not None:
                if entry.outcome.error is not None:
                    raise CommandRefusedError(session_id, key, entry.outcome)
                return entry.outcome
            left = deadline - time.monotonic()
            if left <= 0:
                raise timeout_error(session_id, key, limit, self._run(lambda j: j.sessions()))
            time.sleep(min(self.poll, left))

    def subscribe(
        self, session_id: str, after: int = 0, *, timeout: float | None = None
    ) -> Iterator[Record]:
        """The session's records after ``after``, then those committed later,
        as an ordinary iterator; it ends when the client closes.  ``timeout``:
        seconds to wait for each next record before ``TimeoutError`` (None: no bound).
        ``SessionNotFoundError`` at the first ``next`` for a session that does not exist."""
        journal = self._open()
        limit = check_timeout(timeout)
        return self._follow(journal, session_id, after, limit)

    def _follow(
        self, journal: BlockingJournal, session_id: str, after: int, limit: float
    ) -> Iterator[Record]:
        quiet_since = time.monotonic()
        backoff = Backoff(self.poll)
        while not self._closed:
            try:
                records = journal.read(session_id, after=after)
            except JournalClosedError:
                return
            for record in records:
                yield record
                after = record.seq
            if records:
                quiet_since = time.monotonic()
                backoff.found()
                continue
            if time.monotonic() - quiet_since >= limit:
                raise TimeoutError(
                    f"session {session_id}: no record after seq {after} within {limit} s"
                )
            time.sleep(backoff.pause())

    def sessions(self) -> list[SessionInfo]:
        return self._run(lambda j: j.sessions())


def open_sync_client(url: str, *, poll: float = 0.05) -> SyncClient:
    """A client of the journal at ``url`` for ``with``: the block opens it and closes it."""
    return SyncClient(url=url, poll=poll)
