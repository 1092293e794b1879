"""The console rides out a PostgreSQL restart: a page read while the server
is down is served once it is back (its reads retry, ``journal.retry``)."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from journal import JournalUnavailableError, open_blocking, open_journal
from tests.console.support import running
from tests.support.pgserver import RestartableServer, ShutdownMode, isolated_schema

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_page_read_during_a_restart_is_served_after_it(
    restartable_postgres: RestartableServer, mode: ShutdownMode
) -> None:
    with isolated_schema(restartable_postgres.dsn) as url:
        async with open_journal(url) as journal:
            async with running(journal=journal, clock=time.time_ns, host=False) as env:
                sid = await env.inbox.create("console", key="c/create")
                await trio.to_thread.run_sync(restartable_postgres.shut_down, mode)
                with pytest.raises(JournalUnavailableError):
                    open_blocking(url)  # the server is really gone
                got: list[object] = []

                async def list_page() -> None:
                    got.append(await env.get("/api/sessions"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(list_page)
                    await trio.testing.wait_all_tasks_blocked()
                    # In this thread, blocking: see RestartableServer.
                    restartable_postgres.start_again()
                [response] = got
                assert response.status_code == 200, response.text
                assert [r["session"] for r in response.json()] == [sid]
