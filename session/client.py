"""Client: commands into a session's inbox from any process; outcomes read back.

A client never runs loops.  Each command is checked as ``Session`` checks it
(``validation``) and written with ``put`` under the caller's idempotency key:
sending the same command with the same key again is harmless (the stored
entry is returned, the command is applied once); another command under a
used key is an ``InboxKeyError``.  The host that owns the session applies it;
``wait`` reads its outcome back.

``Client`` runs on anyio, so the same class serves trio and asyncio callers.
Opened by URL (``open_client``) it talks to the journal through the blocking
access of ``journal.open_blocking``, run in anyio's worker threads: under
asyncio nothing starts a trio run.  Built on an open trio ``Journal``
(``Client(journal)``, what a host's own process does) it calls that journal
directly, and so works only under trio.  ``SyncClient`` (``sync_client.py``)
is the blocking twin for threaded programs.  The story: ``docs/clients.md``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec

from journal import (
    BlockingJournal,
    Journal,
    JournalClosedError,
    Record,
    SessionInfo,
    open_blocking,
)
from journal import inbox as ib
from journal.content import Block, Message, ResultBlock
from loopruntime.host import check_principal, new_id

from .status import SessionStatus, blocking_statuses, statuses
from .validation import answer_text, check_decision, steering_text, tool_result, user_message

__all__ = [
    "Client",
    "ClientClosedError",
    "ClientError",
    "ClientNotOpenError",
    "CommandRefusedError",
    "Backoff",
    "WaitTimeoutError",
    "answer_command",
    "check_key",
    "check_timeout",
    "decide_command",
    "open_client",
    "resolve_command",
    "steer_command",
    "submit_command",
    "timeout_error",
]


T = TypeVar("T")
C = TypeVar("C", bound=ib.InboxCommand)


class ClientError(Exception):
    """Base of the errors a client raises itself (the journal's are ``JournalError``)."""


class ClientNotOpenError(ClientError):
    """A client made by ``open_client`` / ``open_sync_client`` used before its block opened it."""

    def __init__(self, url: str, opener: str) -> None:
        self.url = url
        super().__init__(
            f"the client of {url} is not open: use it inside `{opener}` "
            "(the block opens the journal and closes it at the end)"
        )


class ClientClosedError(ClientError):
    """A client used after it was closed (its ``with`` block ended); nothing was sent."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"the client of {url} is closed (its `with` block has ended); nothing was sent: "
            "open a new client to go on"
        )


class CommandRefusedError(ClientError):
    """The session's owner refused the command (nothing was applied)."""

    def __init__(self, session: str, key: str, outcome: ib.InboxOutcome) -> None:
        self.session, self.key, self.outcome = session, key, outcome
        super().__init__(
            f"session {session}: the command with key {key!r} was refused: "
            f"{outcome.error}: {outcome.message}"
        )


class WaitTimeoutError(ClientError, TimeoutError):
    """``wait`` gave up: the command was not applied in time (it stays in the inbox).

    ``owner`` is the host holding the session's lease (None: no host took
    it), ``definition`` what a host must offer to take it."""

    def __init__(
        self,
        session: str,
        key: str,
        timeout: float,
        *,
        owner: str | None,
        live: bool,
        definition: str | None,
    ) -> None:
        self.session, self.key, self.timeout = session, key, timeout
        self.owner, self.definition = owner, definition
        wanted = f"definition {definition!r}" if definition else "its definition"
        start = (
            f"start one offering {wanted} (`loopruntime host --journal URL "
            "--definitions module:NAME`)"
        )
        if owner is None:
            why = f"no host has taken the session: {start}"
        elif not live:
            why = (
                f"its host {owner} stopped renewing its lease (the host is gone or stuck); "
                f"a host offering {wanted} takes it over, or {start}"
            )
        else:
            why = f"its host {owner} holds it but has not applied the command yet"
        super().__init__(
            f"session {session}: the command with key {key!r} was not applied within "
            f"{timeout} s; it waits in the inbox and is applied once a host runs the "
            f"session: {why}"
        )


def timeout_error(
    session: str, key: str, timeout: float, infos: Sequence[SessionInfo]
) -> WaitTimeoutError:
    """The ``WaitTimeoutError`` of a wait on ``session``, from the sessions' listing."""
    info = next((i for i in infos if i.session == session), None)
    owner = info.owner if info is not None else None
    live = info is not None and info.expires_at > time.time_ns()
    definition = info.definition if info is not None else None
    return WaitTimeoutError(session, key, timeout, owner=owner, live=live, definition=definition)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > 200:
        raise ValueError(
            f"an inbox command needs an idempotency key (a non-empty string of at most 200 "
            f"characters), not {key!r}: the same key makes a retry safe"
        )
    return key


def check_timeout(timeout: float | None) -> float:
    """``timeout`` as a number of seconds (None: forever); ``ValueError`` otherwise."""
    if timeout is None:
        return float("inf")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"a wait's timeout is a number of seconds >= 0 or None, not {timeout!r}")
    return float(timeout)


# The inbox command of each client method, checked as ``Session`` checks it:
# shared by ``Client`` and ``SyncClient`` so both refuse the same input.


def submit_command(content: str | Message | Sequence[Block], loop: str | None) -> ib.Submit:
    return ib.Submit(message=user_message(content), loop=loop)


def steer_command(text: str, loop: str | None) -> ib.Steer:
    return ib.Steer(text=steering_text(text), loop=loop)


def answer_command(gate_id: str, text: str | Any) -> ib.Answer:
    """A question's answer; a form's may be given as data, sent as its JSON
    text and checked by the session's owner."""
    return ib.Answer(gate_id=gate_id, text=answer_text(gate_id, text, data=True))


def with_principal(command: C, principal: str | None) -> C:
    """``command`` carrying who sent it (checked: text of at most 200 characters)."""
    principal = check_principal(principal)
    return command if principal is None else msgspec.structs.replace(command, principal=principal)


def decide_command(gate_id: str, allow: bool, scope: str) -> ib.Decide:
    checked = check_decision(gate_id, allow, scope)
    return ib.Decide(gate_id=gate_id, allow=allow, scope=checked)


def resolve_command(
    execution_id: str, result: str | Sequence[ResultBlock], is_error: bool
) -> ib.Resolve:
    content = tool_result(execution_id, result, is_error)
    return ib.Resolve(execution_id=execution_id, content=content, is_error=is_error)


class Backoff:
    """The pauses of a stream that polls: short right after records came (a turn
    writes its records in bursts, a few ms apart), doubling to ``poll`` while
    nothing comes.  A burst costs a few more reads; its tail arrives in ms, not ``poll``."""

    def __init__(self, poll: float) -> None:
        self.poll = poll
        self.delay = poll

    def found(self) -> None:
        """Records came: look again soon."""
        self.delay = self.poll / 8

    def pause(self) -> float:
        """The pause before the next look (each one in a row twice the last, up to ``poll``)."""
        delay = self.delay
        self.delay = min(delay * 2, self.poll)
        return delay


class _Inbox(Protocol):
    """What a ``Client`` needs of a journal, awaitable."""

    url: str

    async def put(
        self, session: str, key: str, command: ib.InboxCommand, definition: str | None
    ) -> ib.InboxEntry: ...

    async def entry(self, session: str, key: str) -> ib.InboxEntry | None: ...

    def subscribe(self, session: str, after: int, poll: float) -> AsyncIterator[Record]: ...

    async def sessions(self) -> list[SessionInfo]: ...

    async def statuses(self) -> list[SessionStatus]: ...

    async def aclose(self) -> None: ...


class _JournalInbox:
    """An open trio ``Journal`` (trio only); its owner closes it."""

    def __init__(self, journal: Journal) -> None:
        self.journal, self.url = journal, journal.url

    async def put(
        self, session: str, key: str, command: ib.InboxCommand, definition: str | None
    ) -> ib.InboxEntry:
        return await self.journal.put(session, key, command, definition=definition)

    async def entry(self, session: str, key: str) -> ib.InboxEntry | None:
        return await self.journal.entry(session, key)

    def subscribe(self, session: str, after: int, poll: float) -> AsyncIterator[Record]:
        return self.journal.tail(session, after=after)

    async def sessions(self) -> list[SessionInfo]:
        return await self.journal.sessions()

    async def statuses(self) -> list[SessionStatus]:
        return await statuses(self.journal)

    async def aclose(self) -> None:
        pass


class _ThreadedInbox:
    """A ``BlockingJournal`` called in anyio's worker threads (any event loop)."""

    def __init__(self, blocking: BlockingJournal) -> None:
        self.blocking, self.url = blocking, blocking.url
        self.closed = False

    async def _run(self, call: Callable[[], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(call)
        except JournalClosedError as exc:
            # Closed by another task while this call ran.
            raise ClientClosedError(self.url) from exc

    async def put(
        self, session: str, key: str, command: ib.InboxCommand, definition: str | None
    ) -> ib.InboxEntry:
        return await self._run(
            partial(self.blocking.put, session, key, command, definition=definition)
        )

    async def entry(self, session: str, key: str) -> ib.InboxEntry | None:
        return await self._run(partial(self.blocking.entry, session, key))

    async def subscribe(self, session: str, after: int, poll: float) -> AsyncIterator[Record]:
        read = self.blocking.read
        # Polled: the records are written by another process; a read that
        # finds nothing new costs one indexed query.
        backoff = Backoff(poll)
        while not self.closed:
            try:
                records = await anyio.to_thread.run_sync(partial(read, session, after=after))
            except JournalClosedError:
                return  # the client closed while the read ran: the stream ends
            for record in records:
                yield record
                after = record.seq
            if records:
                backoff.found()
            else:
                await anyio.sleep(backoff.pause())

    async def sessions(self) -> list[SessionInfo]:
        return await self._run(self.blocking.sessions)

    async def statuses(self) -> list[SessionStatus]:
        return await self._run(partial(blocking_statuses, self.blocking))

    async def aclose(self) -> None:
        self.closed = True
        await anyio.to_thread.run_sync(self.blocking.close)


class Client:
    """Writes commands into sessions' inboxes and reads their outcomes and records.

    ``async with open_client(url) as client:`` under trio or asyncio;
    ``Client(journal)`` on an open trio ``Journal`` (trio only, the journal
    stays its owner's).  Every command takes the caller's idempotency ``key``.
    Safe to use from many tasks at once.
    """

    def __init__(
        self, journal: Journal | None = None, *, poll: float = 0.05, url: str | None = None
    ) -> None:
        """``Client(journal)`` on an open trio journal, or ``Client(url=...)``
        (what ``open_client`` makes): opened by ``async with``."""
        if (journal is None) == (url is None):
            raise TypeError(
                "a Client needs either an open trio journal (Client(journal)) or a journal "
                "URL (async with open_client(url) as client:)"
            )
        self.poll = poll
        self._url = url
        self._inbox: _Inbox | None = None
        self._closed = False
        if journal is not None:
            self._inbox = _JournalInbox(journal)

    @property
    def url(self) -> str:
        """The URL of the journal the client writes to."""
        if self._inbox is not None:
            return self._inbox.url
        assert self._url is not None
        return self._url

    async def __aenter__(self) -> Client:
        if self._closed:
            raise ClientClosedError(self.url)
        if self._inbox is None:
            assert self._url is not None
            blocking = await anyio.to_thread.run_sync(open_blocking, self._url)
            self._inbox = _ThreadedInbox(blocking)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client (and the journal it opened itself).  Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._inbox is not None:
            with anyio.CancelScope(shield=True):
                # Shielded: connections must close even when the caller is cancelled.
                await self._inbox.aclose()

    def _open(self) -> _Inbox:
        if self._closed:
            raise ClientClosedError(self.url)
        if self._inbox is None:
            raise ClientNotOpenError(self.url, "async with open_client(url) as client:")
        return self._inbox

    async def create(
        self,
        definition_name: str,
        *,
        session_id: str | None = None,
        key: str,
        principal: str | None = None,
    ) -> str:
        """Ask for a new session running ``definition_name``; returns its id.
        A host offering that definition starts it."""
        session_id = session_id or new_id("ses_")
        command = ib.Create(definition=definition_name)
        await self._put(session_id, key, command, definition_name, principal=principal)
        return session_id

    async def _put(
        self,
        session_id: str,
        key: str,
        command: ib.InboxCommand,
        definition: str | None = None,
        *,
        principal: str | None,
    ) -> ib.InboxEntry:
        command = with_principal(command, principal)
        return await self._open().put(session_id, check_key(key), command, definition)

    async def submit(
        self,
        session_id: str,
        content: str | Message | Sequence[Block],
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, submit_command(content, loop), principal=principal)

    async def steer(
        self,
        session_id: str,
        text: str,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, steer_command(text, loop), principal=principal)

    async def answer(
        self,
        session_id: str,
        gate_id: str,
        text: str | Any,
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, answer_command(gate_id, text), principal=principal)

    async def decide(
        self,
        session_id: str,
        gate_id: str,
        allow: bool,
        scope: str = "once",
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(
            session_id, key, decide_command(gate_id, allow, scope), principal=principal
        )

    async def resolve(
        self,
        session_id: str,
        execution_id: str,
        result: str | Sequence[ResultBlock],
        is_error: bool = False,
        *,
        key: str,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(
            session_id, key, resolve_command(execution_id, result, is_error), principal=principal
        )

    async def interrupt(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Interrupt(loop=loop), principal=principal)

    async def cancel_queued(
        self,
        session_id: str,
        input_id: str,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(
            session_id, key, ib.CancelQueued(input_id=input_id, loop=loop), principal=principal
        )

    async def compact(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        return await self._put(session_id, key, ib.Compact(loop=loop), principal=principal)

    async def change_mode(
        self,
        session_id: str,
        mode: str | None,
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        return await self._put(
            session_id, key, ib.ChangeMode(mode=mode, loop=loop), principal=principal
        )

    async def wait(
        self,
        session_id: str,
        key: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait's own bound, as the issue asks
    ) -> ib.InboxOutcome:
        """The outcome of the command sent with ``key`` once its session's
        owner applied it: the input or steer id, the record it made.  A refusal
        is a ``CommandRefusedError``; ``WaitTimeoutError`` (a ``TimeoutError``)
        after ``timeout`` seconds, saying whether a host holds the session (the
        command stays in the inbox); ``KeyError`` for a key never sent."""
        inbox = self._open()
        limit = check_timeout(timeout)
        with anyio.move_on_after(limit):
            # Polled: the owner may be another process, with no event to wait on.
            while True:
                entry = await inbox.entry(session_id, key)
                if entry is None:
                    raise KeyError(f"session {session_id} has no command with key {key!r}")
                if entry.outcome is not None:
                    if entry.outcome.error is not None:
                        raise CommandRefusedError(session_id, key, entry.outcome)
                    return entry.outcome
                await anyio.sleep(self.poll)
        raise timeout_error(session_id, key, limit, await inbox.sessions())

    def subscribe(self, session_id: str, after: int = 0) -> AsyncIterator[Record]:
        """The session's records after ``after``, then those committed later
        (until the client closes).  Verified as every read is."""
        return self._open().subscribe(session_id, after, self.poll)

    async def sessions(self) -> list[SessionStatus]:
        """Every session with its owner, lease expiry, waiting entries and
        status (``session.status``: "running" only under a live lease)."""
        return await self._open().statuses()


def open_client(url: str, *, poll: float = 0.05) -> Client:
    """A client of the journal at ``url``, for ``async with`` (trio or asyncio):
    the block opens the journal (creating it when missing) and closes it.
    ``poll``: seconds between looks at the journal while waiting or following."""
    return Client(url=url, poll=poll)
