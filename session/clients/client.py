"""Client: commands into a session's inbox from any process; outcomes read back.

A client never runs loops.  Each command is checked as ``Session`` checks it
(``client_checks``, every argument before the one write) and written with
``put`` under the caller's idempotency key: sending the same command with the
same key again is harmless (the stored entry is returned, the command is
applied once); another command under a used key is an ``InboxKeyError``.  The
host that owns the session applies it; ``wait`` reads its outcome back.

``Client`` runs on anyio, so the same class serves trio and asyncio callers.
Opened by URL (``open_client``) it talks to the journal through the blocking
access of ``journal.open_blocking``, run in anyio's worker threads: under
asyncio nothing starts a trio run.  Built on an open trio ``Journal``
(``Client(journal)``, what a host's own process does) it calls that journal
directly, and so works only under trio.  ``SyncClient`` (``sync_client.py``)
runs this class for threaded programs.  The story: ``docs/clients.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from types import TracebackType
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from journal import (
    BlockingJournal,
    HostInfo,
    InboxEntryTooLargeError,
    Journal,
    JournalClosedError,
    Record,
    RetryingBlocking,
    RetryingJournal,
    SessionInfo,
    SessionNotFoundError,
    open_blocking,
)
from journal import inbox as ib
from journal.content import Block, Message, ResultBlock
from loopruntime.host import new_id

from ..embedded.status import SessionStatus, blocking_statuses, statuses
from .client_checks import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .client_checks import answer_command as answer_command
from .client_checks import (
    check_after,
    check_creation,
    check_id,
    check_poll,
    create_command,
    with_principal,
)
from .client_checks import check_key as check_key
from .client_checks import check_timeout as check_timeout
from .client_checks import decide_command as decide_command
from .client_checks import resolve_command as resolve_command
from .client_checks import steer_command as steer_command
from .client_checks import submit_command as submit_command
from .client_errors import ClientClosedError as ClientClosedError
from .client_errors import ClientError as ClientError
from .client_errors import ClientForkedError as ClientForkedError
from .client_errors import ClientNotOpenError as ClientNotOpenError
from .client_errors import CommandRefusedError as CommandRefusedError
from .client_errors import WaitTimeoutError as WaitTimeoutError
from .client_errors import entry_too_large
from .client_errors import timeout_error as timeout_error

__all__ = [
    "Client",
    "ClientClosedError",
    "ClientError",
    "ClientForkedError",
    "ClientNotOpenError",
    "CommandRefusedError",
    "Backoff",
    "DEFAULT_TIMEOUT",
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

    async def existing(self, session: str) -> SessionInfo | None:
        """The session as the journal lists it; None when there is no such session."""
        ...

    def subscribe(self, session: str, after: int, poll: float) -> AsyncIterator[Record]: ...

    async def sessions(self) -> list[SessionInfo]: ...

    async def statuses(self) -> list[SessionStatus]: ...

    async def hosts(self) -> list[HostInfo]: ...

    async def aclose(self) -> None: ...


def _listed(infos: Sequence[SessionInfo], session: str) -> SessionInfo | None:
    return next((i for i in infos if i.session == session), None)


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

    async def existing(self, session: str) -> SessionInfo | None:
        try:
            await self.journal.head(session)  # one indexed read: a new id ends here
        except SessionNotFoundError:
            return None
        return _listed(await self.journal.sessions(), session)

    def subscribe(self, session: str, after: int, poll: float) -> AsyncIterator[Record]:
        return self.journal.tail(session, after=after)

    async def sessions(self) -> list[SessionInfo]:
        return await self.journal.sessions()

    async def statuses(self) -> list[SessionStatus]:
        return await statuses(self.journal)

    async def hosts(self) -> list[HostInfo]:
        return await self.journal.hosts()

    async def aclose(self) -> None:
        pass


class _ThreadedInbox:
    """A ``BlockingJournal`` called in anyio's worker threads (any event loop);
    closed with the client when ``owned``."""

    def __init__(self, blocking: BlockingJournal, *, owned: bool) -> None:
        self.blocking, self.url, self.owned = blocking, blocking.url, owned
        self.closed = False

    async def _run(self, call: Callable[[], T]) -> T:
        if self.closed:
            raise ClientClosedError(self.url)
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

    async def existing(self, session: str) -> SessionInfo | None:
        def look() -> SessionInfo | None:
            try:
                self.blocking.read(session, limit=1)  # one indexed read: a new id ends here
            except SessionNotFoundError:
                return None
            return _listed(self.blocking.sessions(), session)

        return await self._run(look)

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

    async def hosts(self) -> list[HostInfo]:
        return await self._run(self.blocking.hosts)

    async def aclose(self) -> None:
        self.closed = True
        if self.owned:
            await anyio.to_thread.run_sync(self.blocking.close)


async def _within(
    records: AsyncIterator[Record], session: str, after: int, limit: float
) -> AsyncIterator[Record]:
    """``records``, with a ``TimeoutError`` when none comes within ``limit`` seconds."""
    try:
        while True:
            found = False
            with anyio.move_on_after(limit):
                try:
                    record = await records.__anext__()
                except StopAsyncIteration:
                    return
                # Yielded outside the scope: its deadline bounds the wait only.
                found = True
            if not found:
                raise TimeoutError(
                    f"session {session}: no record after seq {after} within {limit} s"
                )
            yield record
            after = record.seq
    finally:
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()


class Client:
    """Writes commands into sessions' inboxes and reads their outcomes and records.

    ``async with open_client(url) as client:`` (or ``await Client.open(url)``)
    under trio or asyncio; ``Client(journal)`` on an open trio ``Journal``
    (trio only, the journal stays its owner's).  Every command takes the
    caller's idempotency ``key``; every argument is checked before anything
    is written.  Safe to use from many tasks at once.  ``SyncClient`` runs
    this class for threaded programs: a rule written here holds for both.
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
        self.poll = check_poll(poll)
        self._url = url
        self._inbox: _Inbox | None = None
        self._closed = False
        self._opener = "async with open_client(url) as client:"
        if journal is not None:
            # Reads ride out a briefly unreachable journal; a put that cannot
            # reach it raises InboxUnavailableError, retryable under its key.
            retrying = journal if isinstance(journal, RetryingJournal) else RetryingJournal(journal)
            self._inbox = _JournalInbox(retrying)

    @classmethod
    def _on_blocking(cls, blocking: BlockingJournal, *, poll: float) -> Client:
        """A client on an open ``BlockingJournal`` (any event loop; its owner closes it)."""
        client = cls(url=blocking.url, poll=poll)
        client._inbox = _ThreadedInbox(RetryingBlocking(blocking), owned=False)
        return client

    @classmethod
    async def open(cls, url: str, *, poll: float = 0.05) -> Client:
        """A client of the journal at ``url``, open now (created when missing);
        close it with ``aclose()`` or use it as an ``async with`` block."""
        return await cls(url=url, poll=poll).__aenter__()

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
            self._inbox = _ThreadedInbox(RetryingBlocking(blocking), owned=True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client (and the journal it opened itself).  Idempotent;
        waits and streams running in other tasks end, later calls raise
        ``ClientClosedError``."""
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
            raise ClientNotOpenError(self.url, self._opener)
        return self._inbox

    async def _put(
        self,
        session_id: str,
        key: str,
        command: ib.InboxCommand,
        *,
        principal: str | None,
    ) -> ib.InboxEntry:
        """Every argument checked (the command was built and checked by the
        caller), then the one write."""
        session_id = check_id("session id", session_id)
        loop = getattr(command, "loop", None)
        if loop is not None:  # None: the session's main loop
            check_id("loop id", loop)
        key, command = check_key(key), with_principal(command, principal)
        return await _put_checked(self._open(), session_id, key, command, None)

    async def create(
        self,
        definition_name: str,
        *,
        session_id: str | None = None,
        key: str,
        principal: str | None = None,
    ) -> str:
        """Ask for a new session running ``definition_name``; returns its id.
        A host offering that definition starts it.  ``SessionExistsError``
        when ``session_id`` names a session of another definition."""
        command = with_principal(create_command(definition_name), principal)
        key = check_key(key)
        if session_id is not None:
            session_id = check_id("session id", session_id)
        inbox = self._open()
        if session_id is None:
            session_id = new_id("ses_")
        else:
            check_creation(session_id, command.definition, await inbox.existing(session_id))
        await _put_checked(inbox, session_id, key, command, command.definition)
        return session_id

    async def submit(
        self,
        session_id: str,
        content: str | Message | Sequence[Block],
        *,
        key: str,
        loop: str | None = None,
        principal: str | None = None,
    ) -> ib.InboxEntry:
        """Queue input (``EmptyInputError`` for input with no text to send)."""
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

    async def pause(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        """Ask the session's owner to pause ``loop`` (``Session.pause``); the
        entry's outcome value says whether it paused it (False: it already was)."""
        return await self._put(session_id, key, ib.Pause(loop=loop), principal=principal)

    async def resume(
        self, session_id: str, *, key: str, loop: str | None = None, principal: str | None = None
    ) -> ib.InboxEntry:
        """Ask the session's owner to end ``loop``'s pause (``Session.resume``);
        the outcome value says whether it resumed it (False: it was not paused)."""
        return await self._put(session_id, key, ib.Resume(loop=loop), principal=principal)

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
        timeout: float | None = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - the wait's own bound
    ) -> ib.InboxOutcome:
        """The outcome of the command sent with ``key`` once its session's
        owner applied it: the input or steer id, the record it made.  A refusal
        is a ``CommandRefusedError``; ``WaitTimeoutError`` (a ``TimeoutError``)
        after ``timeout`` seconds (30 unless told; None: no bound),
        saying whether a host holds the session (the command stays in the
        inbox); ``KeyError`` for a key never sent."""
        limit = check_timeout(timeout)
        with anyio.move_on_after(limit):
            # Polled: the owner may be another process, with no event to wait on.
            while True:
                entry = await self._open().entry(session_id, key)
                if entry is None:
                    raise KeyError(f"session {session_id} has no command with key {key!r}")
                if entry.outcome is not None:
                    if entry.outcome.error is not None:
                        raise CommandRefusedError(session_id, key, entry.outcome)
                    return entry.outcome
                await anyio.sleep(self.poll)
        inbox = self._open()
        raise timeout_error(session_id, key, limit, await inbox.sessions(), await inbox.hosts())

    def subscribe(
        self, session_id: str, after: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[Record]:
        """The session's records after ``after``, then those committed later
        (until the client closes).  Verified as every read is.  ``timeout``:
        seconds to wait for each next record before ``TimeoutError`` (None:
        no bound).  ``SessionNotFoundError`` at the first record asked for a
        session that does not exist."""
        limit, after = check_timeout(timeout), check_after(after)
        records = self._open().subscribe(check_id("session id", session_id), after, self.poll)
        if limit == float("inf"):
            return records
        return _within(records, session_id, after, limit)

    async def sessions(self) -> list[SessionStatus]:
        """Every session with its owner, lease expiry, waiting entries and
        status (``session.embedded.status``: "running" only under a live lease)."""
        return await self._open().statuses()

    async def hosts(self) -> list[HostInfo]:
        """Every host registered in the journal, live or not, with the
        definitions it serves: a session of a definition no live host serves
        waits in the inbox until one starts."""
        return await self._open().hosts()


async def _put_checked(
    inbox: _Inbox, session: str, key: str, command: ib.InboxCommand, definition: str | None
) -> ib.InboxEntry:
    """The one write of a client: the journal's refusal of an entry too
    large becomes the ``PayloadTooLargeError`` every payload refusal is."""
    try:
        return await inbox.put(session, key, command, definition)
    except InboxEntryTooLargeError as exc:
        raise entry_too_large(exc) from exc


def open_client(url: str, *, poll: float = 0.05) -> Client:
    """A client of the journal at ``url``, for ``async with`` (trio or asyncio):
    the block opens the journal (creating it when missing) and closes it.
    ``poll``: seconds between looks at the journal while waiting or following."""
    return Client(url=url, poll=poll)
