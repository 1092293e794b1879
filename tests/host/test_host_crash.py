"""Hosts in real processes on a real SQLite file and PostgreSQL, SIGKILLed: an inbox entry is
applied exactly once across a kill at the append that consumes it (the
records and the consumption are one transaction), and a host killed with a
tool call in flight is replaced by the next one after its lease expires.

Time: the hosts' leases are short (``crash_hosts.LEASE_TTL``); the tests
wait for the journal to show each state, never for a span of time."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from journal import HostIdInUseError, Journal, open_journal
from journal.events import InputQueued, ToolStarted, TurnEnded
from session import Client, Host
from session.replay import check
from tests.host.support import wait_for
from tests.support.crash_hosts import LEASE_TTL, definitions
from tests.support.crash_scenarios import effects
from tests.support.loops import events_of
from tests.support.processes import CHILD, ROOT, kill_when_ready, run_child


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal both the killed host and the test open: a SQLite file, or a
    schema of the throwaway PostgreSQL server."""
    if request.param == "postgres":
        found: str = request.getfixturevalue("postgres_url")
        return found
    return f"sqlite:///{tmp_path / 'journal.db'}"


async def completed(journal: Journal, session_id: str) -> bool:
    return [e.outcome for e in await events_of(journal, session_id, TurnEnded)] == ["completed"]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_an_entry_is_applied_once_across_a_kill_at_its_consuming_append(
    url: str, tmp_path: Path, when: str
) -> None:
    # Real time (no autojump): under the autojump clock, virtual time jumps on
    # while a SQLite commit runs in its thread, past the host's lease deadline,
    # which stops the session again and again; every wait here is for a state
    # of the journal.
    side = tmp_path / "effects.jsonl"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("fetcher", key="c1")
        entry = await client.submit(sid, "fetch it", key="s1")
    child = await run_child("host-consume", url, str(side), str(entry.number), when)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    async with open_journal(url) as journal:
        stored = await journal.entry(sid, "s1")
        assert stored is not None
        queued = await events_of(journal, sid, InputQueued)
        if when == "after":
            # Records and consumption both durable: they were one transaction.
            assert stored.consumed and len(queued) == 1
            assert stored.outcome is not None and stored.outcome.value == queued[0].input_id
        else:
            # Neither: the entry waits for the next owner.
            assert not stored.consumed and queued == []
        # The client never heard back: it retries with the same key, and is
        # given the stored entry (applied, or still waiting), never a second.
        retry = await Client(journal).submit(sid, "fetch it", key="s1")
        assert (retry.number, retry.consumed) == (entry.number, when == "after")
        async with Host.open(
            journal, definitions(side), host_id="b", lease_ttl=LEASE_TTL, poll=0.05
        ) as b:
            await wait_for(lambda: completed(journal, sid))
            assert b.statistics().failovers == 1
        assert len(await events_of(journal, sid, InputQueued)) == 1
        outcome = await Client(journal).wait(sid, "s1", timeout=5)
        assert outcome.value == (await events_of(journal, sid, InputQueued))[0].input_id
        report = await check(journal, sid)
        assert report.ok, report


async def test_a_killed_host_is_replaced_after_its_lease_expires(url: str, tmp_path: Path) -> None:
    # Real time (no autojump): kill_when_ready's hang guard must not jump
    # while the child starts; every wait below is for a state of the journal.
    side = tmp_path / "hang-effects.jsonl"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("fetcher", key="c1")
        await client.submit(sid, "fetch it", key="s1")
    # Host a takes the session, starts the tool, and is SIGKILLed mid-call.
    await kill_when_ready("host-tool", url, str(side))
    async with open_journal(url) as journal:
        assert len(await events_of(journal, sid, ToolStarted)) == 1
        info = {i.session: i for i in await journal.sessions()}[sid]
        assert info.owner == "a"
        async with Host.open(
            journal, definitions(side), host_id="b", lease_ttl=LEASE_TTL, poll=0.05
        ) as b:
            # Host b takes the session once a's lease expired, re-runs the
            # replay-safe call, and finishes the turn.
            await wait_for(lambda: completed(journal, sid))
            assert b.statistics().failovers == 1
            info = {i.session: i for i in await journal.sessions()}[sid]
            assert info.owner == "b"
        assert [e["tool"] for e in effects(side)] == ["fetch", "fetch"]
        report = await check(journal, sid)
        assert report.ok, report


def _write_lock_free(path: Path) -> bool:
    """Whether no process holds the SQLite file's write lock right now."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


async def test_a_host_paused_past_its_lease_is_fenced_when_it_resumes(tmp_path: Path) -> None:
    # Real time, as above; every wait is for a state of the journal or a log line.
    path = tmp_path / "journal.db"
    url = f"sqlite:///{path}"
    side = tmp_path / "effects.jsonl"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("fetcher", key="c1")
        await client.submit(sid, "first", key="s1")
    a = await trio.lowlevel.open_process(
        [sys.executable, "-m", CHILD, "host-tool", url, str(side)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    assert a.stderr is not None
    try:
        async with open_journal(url) as journal:
            await wait_for(lambda: completed(journal, sid))
            # Paused (SIGSTOP) between two of its transactions, never inside one.
            while True:
                os.kill(a.pid, signal.SIGSTOP)
                if _write_lock_free(path):
                    break
                os.kill(a.pid, signal.SIGCONT)
                await trio.lowlevel.checkpoint()
            await Client(journal).submit(sid, "second", key="s2")
            async with Host.open(
                journal, definitions(side), host_id="b", lease_ttl=LEASE_TTL, poll=0.05
            ) as b:
                await wait_for(lambda: b.statistics().failovers == 1)
                await Client(journal).wait(sid, "s2", timeout=None)
                await wait_for(lambda: turns(journal, sid, 2))
                # Resumed: host a stops the session's work, its deadline past.
                os.kill(a.pid, signal.SIGCONT)
                said = b""
                while b"session_stopped" not in said:
                    chunk = await a.stderr.receive_some()
                    assert chunk, said
                    said += chunk
                info = {i.session: i for i in await journal.sessions()}[sid]
                assert info.owner == "b"
            queued = await events_of(journal, sid, InputQueued)
            assert len(queued) == 2
            report = await check(journal, sid)
            assert report.ok, report
    finally:
        os.kill(a.pid, signal.SIGCONT)
        os.kill(a.pid, signal.SIGKILL)
        await a.wait()


async def turns(journal: Journal, session_id: str, n: int) -> bool:
    return len(await events_of(journal, session_id, TurnEnded)) >= n


async def test_a_host_id_in_use_by_a_live_host_is_refused(url: str, tmp_path: Path) -> None:
    # Real time, as above: the other host runs in its own process.
    side = tmp_path / "effects.jsonl"
    async with open_journal(url) as journal:
        client = Client(journal)
        sid = await client.create("fetcher", key="c1")
    a = await trio.lowlevel.open_process(
        [sys.executable, "-m", CHILD, "host-tool", url, str(side)], cwd=ROOT
    )
    try:
        async with open_journal(url) as journal:
            await Client(journal).wait(sid, "c1", timeout=None)
            with pytest.raises(HostIdInUseError, match="host id 'a' is in use by a live host"):
                async with Host.open(journal, definitions(side), host_id="a", lease_ttl=60):
                    pass
            # Refused before it claimed anything: host a still holds the session.
            [info] = [h for h in await journal.hosts() if h.host == "a"]
            assert info.live and info.definitions == ("fetcher",)
            owned = {i.session: i for i in await journal.sessions()}[sid]
            assert (owned.owner, owned.live) == ("a", True)
            await Client(journal).submit(sid, "fetch it", key="s1")
            await Client(journal).wait(sid, "s1", timeout=None)
    finally:
        a.kill()
        await a.wait()


async def test_a_host_on_postgres_wakes_on_notify(postgres_url: str, tmp_path: Path) -> None:
    # Real time, against the server: the poll is an hour, so only LISTEN/NOTIFY
    # brings the commands in (the fail_after is a hang guard, no measure).
    side = tmp_path / "effects.jsonl"
    async with open_journal(postgres_url) as journal, open_journal(postgres_url) as other:
        async with Host.open(journal, definitions(side), host_id="n1", poll=3600):
            client = Client(other)  # another connection, as another process would
            with trio.fail_after(60):
                sid = await client.create("fetcher", key="c1")
                await client.wait(sid, "c1")
                await client.submit(sid, "fetch it", key="s1")
                await client.wait(sid, "s1")
                await wait_for(lambda: completed(other, sid))
