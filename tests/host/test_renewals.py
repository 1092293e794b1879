"""A host's lease renewals: every lease in one transaction per round, a lost
lease among them still found and its session dropped, rounds kept on their
schedule however long one takes, and on PostgreSQL renewals that never wait
for a connection behind the sessions' reads."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest
import trio

from journal import ForwardingJournal, Journal, SessionLease, open_journal
from journal.inbox import Steer
from journal.location import parse_location
from journal.sqlite import SQLiteJournal
from session import Client, Host
from tests.host.support import counting_definition, trio_clock_journal, wait_for, waiting_on_a_lock

DEFS = {"counter": counting_definition()}


class CountedRenewals(ForwardingJournal):
    """Counts the renewal calls a host makes, and the leases in each."""

    def __init__(self, inner: Journal, *, slow_once: float = 0.0) -> None:
        super().__init__(inner)
        self.single = 0
        self.rounds: list[int] = []
        self.started: list[float] = []
        self.slow_once = slow_once
        self.writes: list[int] = []
        """SQLite: the writer's transactions within each round, from before its
        registration to after its renewals."""
        self._at_register = 0

    def _transactions(self) -> int:
        inner = self.inner
        return inner.statistics().transactions if isinstance(inner, SQLiteJournal) else 0

    async def register_host(
        self, host: str, token: str, *, ttl: float, definitions: Sequence[str] = ()
    ) -> int:
        self._at_register = self._transactions()
        return await self.inner.register_host(host, token, ttl=ttl, definitions=definitions)

    async def renew(self, lease: SessionLease, *, ttl: float) -> SessionLease:
        self.single += 1
        return await self.inner.renew(lease, ttl=ttl)

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        self.started.append(trio.current_time())
        if self.slow_once:
            delay, self.slow_once = self.slow_once, 0.0
            await trio.sleep(delay)
        renewed = await self.inner.renew_all(leases, ttl=ttl)
        self.writes.append(self._transactions() - self._at_register)
        self.rounds.append(len(leases))
        return renewed


async def test_a_host_renews_all_its_leases_in_one_transaction(autojump_clock: object) -> None:
    await renewing_in_one_transaction(trio_clock_journal(), lease_ttl=30)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_host_renews_all_its_leases_in_one_transaction_on(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On the real backends in real time (under autojump_clock, virtual time
    runs ahead while a backend's thread works): short leases, waits for states."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'journal.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    async with open_journal(url) as journal:
        await renewing_in_one_transaction(journal, lease_ttl=3)


async def renewing_in_one_transaction(journal: Journal, *, lease_ttl: float) -> None:
    counted = CountedRenewals(journal)
    client = Client(journal)
    async with Host.open(
        counted, DEFS, host_id="a", poll=0.5, lease_ttl=lease_ttl, idle_after=3600
    ) as host:
        sids = [await client.create("counter", key=f"c{i}") for i in range(12)]
        for i, sid in enumerate(sids):
            await client.wait(sid, f"c{i}", timeout=60)
        await wait_for(lambda: len(counted.rounds) >= 1 and counted.rounds[-1] == 12)
        # A quiet round: the registration and the renewals, two
        # transactions in the writer, not one per session.
        done = len(counted.rounds)
        await wait_for(lambda: len(counted.rounds) > done)
        if isinstance(journal, SQLiteJournal):
            assert counted.writes[-1] == 2
        assert counted.single == 0 and counted.rounds[-1] == 12

        # One lease lost among them (its incarnation moved: the same id
        # taking it again, as a restarted host would): found by the next
        # round, that session dropped, the others kept.
        lost = sids[3]
        await journal.acquire(lost, "a", ttl=30)
        await wait_for(lambda: lost not in host.sessions)
        assert host.statistics().fenced == 1
        assert set(host.sessions) == set(sids) - {lost}
        done = len(counted.rounds)
        await wait_for(lambda: len(counted.rounds) > done)
        assert counted.rounds[-1] == 11 and host.statistics().fenced == 1


async def test_a_slow_round_does_not_push_the_next_one_back(autojump_clock: object) -> None:
    counted = CountedRenewals(trio_clock_journal(), slow_once=8.0)
    client = Client(counted.inner)
    with trio.fail_after(3600):  # a hang guard, in virtual time
        async with Host.open(counted, DEFS, host_id="a", poll=0.5, lease_ttl=30, idle_after=3600):
            start = trio.current_time()
            sid = await client.create("counter", key="c")
            await client.wait(sid, "c", timeout=60)
            await wait_for(lambda: len(counted.rounds) >= 3)
    # Every 10 s from the start of the round before; the first round took 8 s.
    # Counted from the end of each round, the second would start at 28 s.
    offsets = [round(t - start, 3) for t in counted.started[:3]]
    assert offsets == [10.0, 20.0, 30.0]


async def test_postgres_renewals_never_wait_behind_a_busy_pool(postgres_url: str) -> None:
    """Every connection of the journal's pool is held by a put waiting on a row
    lock; a renewal still goes through at once."""
    conninfo = parse_location(postgres_url).conninfo or postgres_url
    async with open_journal(postgres_url) as journal:
        lease = await journal.acquire("renewed", "host-a", ttl=30, create=True)
        await journal.acquire("locked", "host-a", ttl=30, create=True)
        held = threading.Event()
        release = threading.Event()

        def hold_the_row() -> None:
            with psycopg.connect(conninfo) as conn:
                conn.execute(
                    "SELECT 1 FROM loopruntime_sessions WHERE session = 'locked' FOR UPDATE"
                )
                held.set()
                release.wait()

        puts_done = 0

        async def put(i: int) -> None:
            nonlocal puts_done
            await journal.put("locked", f"k{i}", Steer(text="hello"))
            puts_done += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, hold_the_row)
            try:
                with trio.fail_after(60):  # a hang guard, never a measure
                    await trio.to_thread.run_sync(held.wait)
                    for i in range(8):  # more than the pool has connections
                        nursery.start_soon(put, i)
                    # Polled: the server's view of who waits on the lock.
                    while await trio.to_thread.run_sync(waiting_on_a_lock, conninfo) < 4:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                    [renewed] = await journal.renew_all([lease], ttl=60)
                assert renewed is not None and renewed.expires_at > lease.expires_at
                assert puts_done == 0
            finally:
                release.set()
        assert puts_done == 8
