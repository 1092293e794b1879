"""Two hosts' claim passes on PostgreSQL: both read the same claimable
sessions, and each take locks the session's row with ``FOR UPDATE SKIP
LOCKED``; a row another host holds is refused at once, a row it has taken is
refused for its live lease.  So no session is ever taken by both, and the
work still spreads over the two (docs/host.md, "Claiming")."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

import psycopg
import trio

from journal import (
    ForwardingJournal,
    Journal,
    LeaseHeldError,
    SessionLease,
    SessionNotFoundError,
    open_journal,
)
from journal.inbox import Create
from journal.location import parse_location
from session import Client, Host
from tests.host.support import counting_definition, waiting_on_a_lock

DEFS = {"counter": counting_definition()}


class CountedTakes(ForwardingJournal):
    """Records every take a host made, and every take it was refused."""

    def __init__(self, inner: Journal, taken: Counter[str]) -> None:
        super().__init__(inner)
        self.taken = taken
        self.mine: set[str] = set()
        self.refused = 0

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        taken = await self.inner.acquire_all(sessions, owner, ttl=ttl)
        for outcome in taken:
            if isinstance(outcome, SessionLease):
                self.taken[outcome.session] += 1
                self.mine.add(outcome.session)
            elif isinstance(outcome, LeaseHeldError):
                self.refused += 1
        return taken


async def test_two_hosts_never_both_take_one_session(postgres_url: str) -> None:
    sessions = 40
    taken: Counter[str] = Counter()
    async with open_journal(postgres_url) as journal:
        client = Client(journal)
        # Every session waits before either host looks: both passes see all 40.
        sids = [await client.create("counter", key=f"c{i}") for i in range(sessions)]
        for sid in sids:
            await client.submit(sid, "count", key="s")
        async with open_journal(postgres_url) as a_journal, open_journal(postgres_url) as b_journal:
            a = CountedTakes(a_journal, taken)
            b = CountedTakes(b_journal, taken)
            async with trio.open_nursery() as nursery:
                hosts: list[Host] = []

                async def run(journal: Journal, host_id: str, done: trio.Event) -> None:
                    async with Host.open(
                        journal, DEFS, host_id=host_id, poll=0.05, lease_ttl=30, idle_after=3600
                    ) as host:
                        hosts.append(host)
                        await done.wait()

                done = trio.Event()
                nursery.start_soon(run, a, "a", done)
                nursery.start_soon(run, b, "b", done)
                for sid in sids:
                    await client.wait(sid, "s", timeout=120)
                done.set()
    # Each session taken once, by one host; none applied twice.
    assert set(taken) == set(sids) and set(taken.values()) == {1}
    assert a.mine.isdisjoint(b.mine) and len(a.mine) + len(b.mine) == sessions
    async with open_journal(postgres_url) as journal:
        for sid in sids:
            [entry] = [e for e in [await journal.entry(sid, "s")] if e is not None]
            assert entry.outcome is not None and entry.outcome.error is None


async def test_a_lease_taken_while_another_waited_on_the_row_is_seen(postgres_url: str) -> None:
    """A lease change that waited for the session's row lock decides against
    the lease as it stands once the lock is its own, not as it stood when its
    statement began: another host's take committed meanwhile is seen, and
    refused against (the cause of a live session once taken by a second host)."""
    conninfo = parse_location(postgres_url).conninfo or postgres_url
    async with open_journal(postgres_url) as journal:
        await journal.put("raced", "k", Create(definition="counter"), definition="counter")
        taken = threading.Event()
        commit = threading.Event()

        def take_it_as_another_host() -> None:
            # What a host's take writes, holding the row until told to commit.
            with psycopg.connect(conninfo) as conn:
                conn.execute(
                    "SELECT 1 FROM loopruntime_sessions WHERE session = 'raced' FOR UPDATE"
                )
                conn.execute(
                    "UPDATE loopruntime_sessions SET incarnation = incarnation + 1"
                    " WHERE session = 'raced'"
                )
                conn.execute(
                    "UPDATE loopruntime_leases SET owner = 'host-a', expires_at ="
                    " (extract(epoch FROM clock_timestamp()) * 1e9)::bigint + 3600000000000"
                    " WHERE session = 'raced'"
                )
                taken.set()
                commit.wait()

        refused: list[BaseException] = []

        async def open_it() -> None:
            try:
                await journal.open_session("raced", create=False)
            except LeaseHeldError as exc:
                refused.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, take_it_as_another_host)
            try:
                with trio.fail_after(60):  # a hang guard, never a measure
                    await trio.to_thread.run_sync(taken.wait)
                    nursery.start_soon(open_it)
                    # Polled: the server's view of who waits on the lock.
                    while await trio.to_thread.run_sync(waiting_on_a_lock, conninfo) < 1:  # noqa: ASYNC110
                        await trio.sleep(0.02)
            finally:
                commit.set()
        assert len(refused) == 1 and refused[0].owner == "host-a"  # type: ignore[attr-defined]
        info = {i.session: i for i in await journal.sessions()}["raced"]
        assert info.owner == "host-a" and info.live
