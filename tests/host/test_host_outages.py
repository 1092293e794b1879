"""A host rides out its journal going out of reach: a PostgreSQL server
restarted under it (fast and immediate, in this process and in a host
process of its own), a SQLite file locked past its busy timeout, and, under
``autojump_clock``, an outage longer than its leases.  It claims nothing
meanwhile, reports not ready, logs the outage once when it begins and once
when it ends, and then applies what comes.

Time: the PostgreSQL tests run in real time against a server of their own
(``tests.support.pgrestart``), waiting for states, never for spans."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
from structlog.testing import capture_logs

from journal import ForwardingJournal, Journal, JournalUnavailableError, open_journal
from journal.inbox import Claim, InboxEntry, Wakeup
from session import Client, Host
from session.hosting.host_outage import RETRY_CAP
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.support.pgrestart import Restartable, restartable_server
from tests.support.pgserver import ServerUnavailable, isolated_schema
from tests.support.processes import ROOT

DEFS = {"counter": counting_definition()}


@pytest.fixture(scope="module")
def restartable() -> Iterator[Restartable]:
    try:
        with restartable_server() as server:
            yield server
    except ServerUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the PostgreSQL tests: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL tests skipped: {exc}")


@pytest.fixture
def url(restartable: Restartable) -> Iterator[str]:
    with isolated_schema(restartable.dsn) as found:
        yield found


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_host_rides_out_a_postgres_restart(
    mode: str, restartable: Restartable, url: str
) -> None:
    with capture_logs() as logs:
        async with open_journal(url) as journal:
            async with Host.open(journal, DEFS, host_id="a", poll=0.05, lease_ttl=30) as host:
                client = Client(journal)
                sid = await client.create("counter", key="c1")
                await client.wait(sid, "c1", timeout=None)
                hosted = host.sessions[sid]
                await trio.to_thread.run_sync(restartable.restart, mode)
                await wait_for(lambda: host.statistics().outages >= 1)
                await wait_for(lambda: host.ready)
                # A command sent after the restart (from a journal of its own,
                # as another process would) is applied by the same session.
                async with open_journal(url) as other:
                    await Client(other).submit(sid, "count", key="s1")
                    await Client(other).wait(sid, "s1", timeout=None)
                assert host.sessions.get(sid) is hosted
                assert host.statistics().expired == 0
    began = [e for e in logs if e["event"] == "journal_unreachable"]
    ended = [e for e in logs if e["event"] == "journal_reachable_again"]
    assert len(began) == len(ended) == host.statistics().outages
    assert all(e["outage_seconds"] >= 0 for e in ended)
    assert not [e for e in logs if e["event"] in ("session_failed", "session_dropped")]


async def test_a_host_process_rides_out_an_immediate_restart(
    restartable: Restartable, url: str
) -> None:
    host = await trio.lowlevel.open_process(
        [sys.executable, "-m", "session.cli.main", "host", "--journal", url,
         "--definitions", "tests.support.crash_hosts:cli_definitions",
         "--host-id", "h1", "--lease-ttl", "30", "--poll", "0.05"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert host.stderr is not None
    said = b""

    async def listen() -> None:
        nonlocal said
        assert host.stderr is not None
        while chunk := await host.stderr.receive_some():
            said += chunk

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            async with open_journal(url) as journal:
                client = Client(journal)
                sid = await client.create("fetcher", key="c1")
                await client.wait(sid, "c1", timeout=None)
            await trio.to_thread.run_sync(restartable.restart, "immediate")
            await wait_for(lambda: b"journal_reachable_again" in said)
            async with open_journal(url) as journal:
                client = Client(journal)
                await client.submit(sid, "fetch it", key="s1")
                await client.wait(sid, "s1", timeout=None)
            assert host.returncode is None  # it never exited
            os.kill(host.pid, signal.SIGTERM)
            await host.wait()
        assert host.returncode == 0, said.decode()
        assert b"journal_unreachable" in said
    finally:
        if host.returncode is None:
            host.kill()
            await host.wait()


class Unreachable(ForwardingJournal):
    """Every call the host makes fails as an unreachable server's would while
    ``down``; counts the renewal rounds tried meanwhile."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.down = False
        self.tries: list[float] = []

    def _check(self) -> None:
        if self.down:
            raise JournalUnavailableError("cannot reach the journal (a test)")

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        if self.down:
            self.tries.append(trio.current_time())
        self._check()
        return await self.inner.register_host(host, token, ttl=ttl, definitions=definitions)

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        self._check()
        return await self.inner.claimable(definitions=definitions, owner=owner, limit=limit)

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        self._check()
        return await self.inner.inbox(session, after=after)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.inner.append(*args, **kwargs)

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:  # type: ignore[override]
        self._check()
        async for wakeup in self.inner.inbox_wakeups():
            self._check()
            yield wakeup


async def test_an_outage_longer_than_the_leases_is_ridden_out(autojump_clock: object) -> None:
    journal = Unreachable(trio_clock_journal())
    client = Client(journal.inner)
    with capture_logs() as logs, trio.fail_after(3600):  # a hang guard, in virtual time
        async with Host.open(journal, DEFS, host_id="a", poll=0.5, lease_ttl=30) as host:
            sid = await client.create("counter", key="c1")
            await client.wait(sid, "c1", timeout=None)
            assert host.ready
            journal.down = True
            await wait_for(lambda: not host.ready)
            # Past its lease: the session's work stops at its deadline, and
            # the host itself goes on, claiming nothing.
            await wait_for(lambda: host.statistics().expired == 1)
            claims = host.statistics().claims
            await client.submit(sid, "count", key="s1")
            await trio.sleep(120)
            assert host.statistics().claims == claims and not host.ready
            journal.down = False
            await wait_for(lambda: host.ready)
            await client.wait(sid, "s1", timeout=None)
    began = [e for e in logs if e["event"] == "journal_unreachable"]
    ended = [e for e in logs if e["event"] == "journal_reachable_again"]
    assert len(began) == len(ended) == 1
    assert ended[0]["outage_seconds"] >= 120
    # Retried with a capped, growing backoff: neither hot nor on the round's
    # schedule (a renewal round every lease_ttl / 3 = 10 s).  A gap may pass
    # RETRY_CAP by the round's own calls after a wait, never reach a round.
    gaps = [b - a for a, b in zip(journal.tries, journal.tries[1:], strict=False)]
    assert max(gaps) < 30 / 3 and RETRY_CAP < 30 / 3
    assert 10 < len(journal.tries) < 200


async def test_a_host_rides_out_a_sqlite_file_locked_past_its_busy_timeout(
    tmp_path: Path,
) -> None:
    # Real time: SQLite's busy timeout runs in its own thread.  Another
    # process's connection holds the file's write lock until the host has
    # said it is not ready; the host's writes fail meanwhile ("locked").
    path = tmp_path / "journal.db"
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            held.set()
            release.wait()
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    with capture_logs() as logs:
        async with open_journal(f"sqlite:///{path}") as journal:
            async with Host.open(journal, DEFS, host_id="a", poll=0.05, lease_ttl=30) as host:
                client = Client(journal)
                sid = await client.create("counter", key="c1")
                await client.wait(sid, "c1", timeout=None)
                hosted = host.sessions[sid]
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.to_thread.run_sync, hold_the_lock)
                    try:
                        await trio.to_thread.run_sync(held.wait)
                        await wait_for(lambda: not host.ready)
                    finally:
                        release.set()
                await wait_for(lambda: host.ready)
                await client.submit(sid, "count", key="s1")
                await client.wait(sid, "s1", timeout=None)
                assert host.sessions.get(sid) is hosted
    [began] = [e for e in logs if e["event"] == "journal_unreachable"]
    assert "locked" in str(began["error"])
    assert [e["event"] for e in logs].count("journal_reachable_again") == 1
