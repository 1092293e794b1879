"""SyncClient: ``Client`` as blocking calls, for threaded programs.

A ``SyncClient`` holds a ``Client`` and a private event loop (trio, in a
daemon thread, reached with ``trio.from_thread``); each method hands
its call to that loop and blocks until it returns.  So every rule -- the
checks before a write, a wait's bound and what its timeout says, a stream's
pauses -- is written once, in ``Client``, and this module only crosses
threads.  One client is safe to share between threads: the loop takes
calls from any of them.  docs/decisions.md ("Clients") says why the blocking
twin delegates rather than repeats.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial, wraps
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import trio

from journal import BlockingJournal, Record
from journal import inbox as ib

from .client import Client
from .client_checks import DEFAULT_TIMEOUT, check_poll, check_thread_wait
from .client_errors import ClientClosedError, ClientForkedError

__all__ = ["SyncClient", "open_sync_client"]

T = TypeVar("T")
P = ParamSpec("P")

_OPENER = "with open_sync_client(url) as client:"


class _LoopThread:
    """A trio run in a daemon thread that runs the coroutines handed to it.

    Calls cross with ``trio.from_thread.run`` and the run's token: the
    crossing trio itself offers, cheaper than a portal's task group (the
    figures are in benchmarks/README.md).  Daemon: a program that forgets
    ``close()`` still exits (the journal's connections end with the
    process), where a worker thread the interpreter joins at exit would
    hang it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._failure: BaseException | None = None

        def main() -> None:
            try:
                trio.run(self._serve, started)
            except BaseException as exc:  # reported to the opener below
                self._failure = exc
            finally:
                started.set()

        self._thread = threading.Thread(target=main, name="loopruntime-sync-client", daemon=True)
        self._thread.start()
        started.wait()
        if self._token is None:
            raise RuntimeError("the SyncClient's event loop did not start") from self._failure

    async def _serve(self, started: threading.Event) -> None:
        self._running = 0
        self._idle = trio.Event()
        self._stopping = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        started.set()
        await self._stopping.wait()
        # The calls still running finish first: the run's end would cancel them.
        while self._running:
            self._idle = trio.Event()
            await self._idle.wait()

    async def _counted(self, run: Callable[[], Awaitable[T]]) -> T:
        self._running += 1
        try:
            return await run()
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    def call(self, run: Callable[[], Awaitable[T]]) -> T:
        """``run()`` in the loop's thread; its result or its exception here.
        After ``stop``, a ``RuntimeError`` (trio's ``RunFinishedError``)."""
        assert self._token is not None
        return trio.from_thread.run(self._counted, run, trio_token=self._token)

    def stop(self) -> None:
        """Stop once the calls still running returned (a closed client ends them)."""
        assert self._token is not None
        try:
            trio.from_thread.run_sync(self._stopping.set, trio_token=self._token)
        except trio.RunFinishedError:
            pass  # the run already ended (it failed)
        self._thread.join()


class _End:
    """The end of a stream, handed back across the thread as a value."""


async def _next_of(records: AsyncIterator[Record]) -> Record | _End:
    try:
        return await records.__anext__()
    except StopAsyncIteration:
        return _End()


def _blocking(
    method: Callable[Concatenate[Client, P], Awaitable[T]],
) -> Callable[Concatenate[SyncClient, P], T]:
    """``Client``'s ``method`` as ``SyncClient``'s: the same parameters,
    checks, errors, result and docstring, without ``await``.  Made from the
    one method, so the twins cannot drift apart."""

    @wraps(method)
    def blocking(self: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._call(method, self._client, *args, **kwargs)

    blocking.__module__, blocking.__qualname__ = __name__, f"SyncClient.{method.__name__}"
    return blocking


class SyncClient:
    """Blocking twin of ``Client``: ``with open_sync_client(url) as client:``
    (or ``SyncClient.open(url)``), or ``SyncClient(blocking)`` on an open
    ``BlockingJournal`` (its owner closes it).  The same methods, arguments,
    checks, errors and results as ``Client``'s, without ``await``.  Safe to
    share between threads."""

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
        poll = check_poll(poll)
        if journal is not None:
            self._client = Client._on_blocking(journal, poll=poll)
        else:
            assert url is not None
            self._client = Client(url=url, poll=poll)
        self._client._opener = _OPENER
        self._loop: _LoopThread | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, url: str, *, poll: float = 0.05) -> SyncClient:
        """A client of the journal at ``url``, open now (created when missing);
        close it with ``close()`` or use it as a ``with`` block."""
        return cls(url=url, poll=poll).__enter__()

    @property
    def poll(self) -> float:
        return self._client.poll

    @property
    def url(self) -> str:
        return self._client.url

    def _running(self) -> _LoopThread:
        """The event loop, started by the first call; ``ClientClosedError`` once closed."""
        with self._lock:
            if self._closed:
                raise ClientClosedError(self.url)
            if self._loop is None:
                self._loop = _LoopThread()
            elif self._loop.pid != os.getpid():
                # A forked child has no copy of the loop's thread: a call would wait forever.
                raise ClientForkedError(self.url)
            return self._loop

    def _call(self, method: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        loop = self._running()
        try:
            return loop.call(partial(method, *args, **kwargs))
        except RuntimeError as exc:
            if self._closed:  # closed by another thread as this call was handed over
                raise ClientClosedError(self.url) from exc
            raise

    def __enter__(self) -> SyncClient:
        try:
            self._call(self._client.__aenter__)
        except BaseException:
            # Not opened: no thread is left behind, and a later ``with`` may try again.
            with self._lock:
                loop, self._loop = self._loop, None
            if loop is not None:
                loop.stop()
            raise
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
        running in other threads end (a wait with ``ClientClosedError``, a
        stream as exhausted), later ones raise ``ClientClosedError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop = self._loop
        if loop is not None:
            loop.call(self._client.aclose)
            loop.stop()

    # -- commands and listings: ``Client``'s own, blocking ------------------------

    create = _blocking(Client.create)
    submit = _blocking(Client.submit)
    steer = _blocking(Client.steer)
    answer = _blocking(Client.answer)
    decide = _blocking(Client.decide)
    resolve = _blocking(Client.resolve)
    interrupt = _blocking(Client.interrupt)
    pause = _blocking(Client.pause)
    resume = _blocking(Client.resume)
    cancel_queued = _blocking(Client.cancel_queued)
    compact = _blocking(Client.compact)
    change_mode = _blocking(Client.change_mode)
    sessions = _blocking(Client.sessions)
    hosts = _blocking(Client.hosts)

    # -- reading -------------------------------------------------------------------

    def wait(
        self, session_id: str, key: str, timeout: float | None = DEFAULT_TIMEOUT
    ) -> ib.InboxOutcome:
        """``Client.wait``, blocking this thread: ``timeout`` None is refused
        (``math.inf`` waits without a bound, said on purpose)."""
        return self._call(self._client.wait, session_id, key, check_thread_wait(timeout))

    def subscribe(
        self, session_id: str, after: int = 0, *, timeout: float | None = None
    ) -> Iterator[Record]:
        """``Client.subscribe`` as an ordinary iterator; it ends when the client closes."""
        loop = self._running()
        records = self._client.subscribe(session_id, after, timeout=timeout)
        return self._follow(loop, records)

    def _follow(self, loop: _LoopThread, records: AsyncIterator[Record]) -> Iterator[Record]:
        try:
            while not isinstance(record := loop.call(partial(_next_of, records)), _End):
                yield record
        finally:
            # A stream left early (``break``) gives its reader back; a closed
            # client's streams ended with it.
            if not self._closed:
                try:
                    loop.call(getattr(records, "aclose", _nothing))
                except RuntimeError:
                    if not self._closed:
                        raise


async def _nothing() -> None:
    pass


def open_sync_client(url: str, *, poll: float = 0.05) -> SyncClient:
    """A client of the journal at ``url`` for ``with``: the block opens it and closes it."""
    return SyncClient(url=url, poll=poll)
