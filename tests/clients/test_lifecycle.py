"""Clients used wrongly, and clients shared: a client outside its block, a
closed one, URLs that do not open, a ``SyncClient`` wait past its timeout
-- each a named error, nothing written -- and one ``SyncClient`` (or one
``Client``) used by many threads (tasks) at once.  No host runs here: what
is checked is what the clients write and refuse."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from journal import JournalUnavailableError, open_blocking
from session import (
    ClientClosedError,
    ClientForkedError,
    ClientNotOpenError,
    SyncClient,
    WaitTimeoutError,
    open_client,
    open_sync_client,
)
from tests.support.pgserver import isolated_schema


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        with isolated_schema(request.getfixturevalue("postgres_dsn")) as found:
            yield found
    else:
        yield f"sqlite:///{tmp_path / 'journal.db'}"


def sessions_named(url: str, session: str) -> list[str]:
    blocking = open_blocking(url)
    try:
        return [i.session for i in blocking.sessions() if i.session == session]
    finally:
        blocking.close()


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_client_outside_its_block_says_so_and_writes_nothing(url: str, backend: str) -> None:
    async def main() -> None:
        client = open_client(url)
        with pytest.raises(ClientNotOpenError, match=r"async with open_client\(url\)"):
            await client.create("echo", session_id="s1", key="c1")
        async with client:
            sid = await client.create("echo", session_id="s2", key="c1")
        with pytest.raises(ClientClosedError, match="is closed"):
            await client.submit(sid, "late", key="m1")
        with pytest.raises(ClientClosedError):
            await client.sessions()
        with pytest.raises(ClientClosedError):
            async with client:
                pass

    anyio.run(main, backend=backend)
    assert sessions_named(url, "s1") == []
    blocking = open_blocking(url)
    try:
        assert blocking.entry("s2", "c1") is not None
        assert blocking.entry("s2", "m1") is None
    finally:
        blocking.close()


def test_a_sync_client_outside_its_block_says_so(url: str) -> None:
    client = open_sync_client(url)
    with pytest.raises(ClientNotOpenError, match=r"with open_sync_client\(url\)"):
        client.create("echo", session_id="s1", key="c1")
    with client:
        client.create("echo", session_id="s2", key="c1")
    with pytest.raises(ClientClosedError):
        client.submit("s2", "late", key="m1")
    with pytest.raises(ClientClosedError):
        client.wait("s2", "c1")
    assert sessions_named(url, "s1") == []


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_urls_that_do_not_open_are_named_errors(tmp_path: Path, backend: str) -> None:
    async def enter(url: str) -> None:
        async with open_client(url):
            raise AssertionError("opened")

    with pytest.raises(JournalUnavailableError, match="cannot reach PostgreSQL"):
        anyio.run(enter, "postgresql://nobody@127.0.0.1:1/none", backend=backend)
    with pytest.raises(ValueError, match="memory journal"):
        anyio.run(enter, "memory:", backend=backend)
    with pytest.raises(ValueError, match="unknown journal URL"):
        anyio.run(enter, "ftp://example.org/journal", backend=backend)
    with pytest.raises(JournalUnavailableError):
        anyio.run(enter, f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'j.db'}", backend=backend)
    with pytest.raises(JournalUnavailableError):
        with open_sync_client("postgresql://nobody@127.0.0.1:1/none"):
            raise AssertionError("opened")
    with pytest.raises(ValueError, match="memory journal"):
        SyncClient.open("memory:")


def test_a_sync_wait_past_its_timeout_names_the_session_and_the_missing_host(url: str) -> None:
    with SyncClient.open(url) as client:
        sid = client.create("reviewer", key="c1")
        client.submit(sid, "anyone?", key="m1")
        with pytest.raises(WaitTimeoutError) as caught:
            client.wait(sid, "m1", timeout=0.1)
        assert caught.value.session == sid and caught.value.definition == "reviewer"
        assert "no host has taken the session" in str(caught.value)
        assert "it waits in the inbox" in str(caught.value)
        with pytest.raises(ValueError, match="needs a timeout"):
            client.wait(sid, "m1", timeout=None)  # type: ignore[arg-type]
        # A stream with nothing new for its timeout says so.
        with pytest.raises(TimeoutError, match=f"session {sid}: no record after seq 0"):
            next(client.subscribe(sid, timeout=0.1))
        # The command waits, untouched, for a host.
        [info] = [i for i in client.sessions() if i.session == sid]
        assert info.pending == 2


def test_one_sync_client_shared_by_threads(url: str) -> None:
    """Eight threads send through one client at once, two of them each
    command: every key is one entry, numbered without gaps."""
    with SyncClient.open(url) as client:
        sid = client.create("echo", key="c1")
        numbers: dict[str, set[int]] = {}
        lock = threading.Lock()
        errors: list[BaseException] = []

        def send(worker: int) -> None:
            try:
                for i in range(6):
                    key = f"m{(worker // 2)}-{i}"  # workers 2k and 2k+1 share keys
                    entry = client.submit(sid, f"message {key}", key=key)
                    with lock:
                        numbers.setdefault(key, set()).add(entry.number)
                    assert client.sessions()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert all(len(found) == 1 for found in numbers.values()), numbers
        assert sorted(n for found in numbers.values() for n in found) == list(range(2, 26))


def test_a_sync_subscription_ends_when_another_thread_closes_the_client(url: str) -> None:
    client = SyncClient.open(url, poll=0.01)
    sid = client.create("echo", key="c1")
    seen: list[object] = []
    follower = threading.Thread(target=lambda: seen.extend(client.subscribe(sid)))
    follower.start()
    client.close()
    follower.join(timeout=60)  # a hang guard, not a timing bound
    assert not follower.is_alive() and seen == []


def test_one_client_shared_by_asyncio_tasks(url: str) -> None:
    async def main() -> list[int]:
        async with open_client(url) as client:
            sid = await client.create("echo", key="c1")
            sent = await asyncio.gather(
                *(client.submit(sid, f"m{i % 10}", key=f"k{i % 10}") for i in range(30))
            )
            return [entry.number for entry in sent]

    numbers = asyncio.run(main())
    assert sorted(set(numbers)) == list(range(2, 12))


def test_under_asyncio_no_trio_run_is_started(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call a client makes under asyncio is asyncio's and its worker
    threads': starting a trio run anywhere fails this test."""
    import trio
    import trio.lowlevel

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a trio run was started behind an asyncio caller")

    monkeypatch.setattr(trio, "run", refuse)
    monkeypatch.setattr(trio.lowlevel, "start_guest_run", refuse)

    async def main() -> None:
        async with open_client(url, poll=0.01) as client:
            sid = await client.create("echo", key="c1")
            entry = await client.submit(sid, "hi", key="m1")
            assert entry.number == 2
            with pytest.raises(TimeoutError):  # no host here: the command waits
                await client.wait(sid, "m1", timeout=0.05)
            assert [i.session for i in await client.sessions()] == [sid]
            stream = client.subscribe(sid)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await anext(aiter(stream))

    asyncio.run(main())


def test_a_client_needs_a_journal_or_a_url() -> None:
    from session import Client

    with pytest.raises(TypeError, match="either an open trio journal"):
        Client()
    with pytest.raises(TypeError, match="either an open BlockingJournal"):
        SyncClient()


def test_a_sync_wait_ends_with_a_named_error_when_another_thread_closes_the_client(
    url: str,
) -> None:
    client = SyncClient.open(url, poll=0.01)
    sid = client.create("echo", key="c1")
    client.submit(sid, "hi", key="m1")
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            client.wait(sid, "m1", timeout=60)
        except BaseException as exc:
            raised.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    client.close()
    waiter.join(timeout=60)  # a hang guard, not a timing bound
    assert not waiter.is_alive()
    [error] = raised
    assert isinstance(error, ClientClosedError) and "is closed" in str(error)


def sync_client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "loopruntime-sync-client"]


def test_a_sync_client_leaves_no_thread_behind(url: str) -> None:
    """A ``SyncClient`` runs its calls on an event loop in a thread of its own:
    closing it ends that thread, and so does a failed open."""
    before = sync_client_threads()  # what other tests left open
    with SyncClient.open(url) as client:
        client.create("echo", key="c1")
        assert len(sync_client_threads()) == len(before) + 1
    assert sync_client_threads() == before
    for _ in range(3):
        with pytest.raises(JournalUnavailableError):
            SyncClient.open("postgresql://nobody@127.0.0.1:1/none")
    assert sync_client_threads() == before


def test_a_sync_client_used_after_a_fork_says_so(url: str) -> None:
    """A pre-forking server opens a client, then forks: the child has no copy of
    the client's event loop thread, so its calls are refused by name (before,
    they would have waited forever), and the parent's client goes on."""
    with SyncClient.open(url) as client:
        sid = client.create("echo", key="c1")
        child = os.fork()
        if child == 0:  # the child: report through the exit code only
            try:
                client.submit(sid, "from the child", key="m1")
            except ClientForkedError as exc:
                os._exit(0 if "open a client in each process" in str(exc) else 3)
            except BaseException:
                os._exit(2)
            os._exit(1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.submit(sid, "from the parent", key="m2").number == 2
