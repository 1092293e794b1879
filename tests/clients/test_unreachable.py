"""Clients ride out a PostgreSQL restart: their reads retry (``journal.retry``)
and a put made while the server is down raises ``InboxUnavailableError``,
retryable, which the same key later stores once.  A real server, restarted
(``pg_ctl restart -m fast`` and ``-m immediate``, as ``restartable_postgres``
does them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from journal import (
    InboxUnavailableError,
    JournalUnavailableError,
    open_blocking,
    open_journal,
)
from session.clients.client import open_client
from session.clients.sync_client import open_sync_client
from tests.support.pgserver import RestartableServer, ShutdownMode, isolated_schema

pytestmark = pytest.mark.slow


@pytest.fixture
def url(restartable_postgres: RestartableServer) -> Iterator[str]:
    with isolated_schema(restartable_postgres.dsn) as url:
        yield url


def assert_down(url: str) -> None:
    """Opening (which retries nothing) fails: the server is really gone."""
    with pytest.raises(JournalUnavailableError):
        open_blocking(url)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_reads_of_a_client_ride_out_a_restart(
    restartable_postgres: RestartableServer, url: str, mode: ShutdownMode
) -> None:
    async with open_client(url) as client:
        session = await client.create("demo", key="create-1")
        await trio.to_thread.run_sync(restartable_postgres.shut_down, mode)
        await trio.to_thread.run_sync(assert_down, url)
        listed: list[str] = []

        async def list_sessions() -> None:
            listed.extend(s.session for s in await client.sessions())

        async with trio.open_nursery() as nursery:
            # The listing starts while the server is down and retries until
            # the server is back.
            nursery.start_soon(list_sessions)
            await trio.testing.wait_all_tasks_blocked()
            # In this thread, blocking: see RestartableServer.
            restartable_postgres.start_again()
        assert listed == [session]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_sync_client_puts_again_under_its_key_after_a_restart(
    restartable_postgres: RestartableServer, url: str, mode: ShutdownMode
) -> None:
    with open_sync_client(url) as client:
        session = client.create("demo", key="create-1")
        restartable_postgres.shut_down(mode)
        try:
            with pytest.raises(InboxUnavailableError) as raised:
                client.submit(session, "hello", key="hello-1")
        finally:
            restartable_postgres.start_again()
        assert raised.value.retryable
        assert (raised.value.session, raised.value.key) == (session, "hello-1")
        assert "send it again with the same key" in str(raised.value)
        # Sent again, twice: stored once.
        first = client.submit(session, "hello", key="hello-1")
        again = client.submit(session, "hello", key="hello-1")
        assert first == again

    async def inbox() -> list[int]:
        async with open_journal(url) as journal:
            return [e.number for e in await journal.inbox(session)]

    assert trio.run(inbox) == [1, 2]
