"""Two hosts' claim passes on PostgreSQL: both read the same claimable
sessions, and each take locks the session's row with ``FOR UPDATE SKIP
LOCKED``; a row another host holds is refused at once, a row it has taken is
refused for its live lease.  So no session is ever taken by both, and the
work still spreads over the two (docs/host.md, "Claiming")."""

from __future__ import annotations

from collections import Counter

import trio

from journal import ForwardingJournal, Journal, LeaseHeldError, SessionLease, open_journal
from session import Client, Host
from tests.host.support import counting_definition

DEFS = {"counter": counting_definition()}


class CountedTakes(ForwardingJournal):
    """Records every take a host made, and every take it was refused."""

    def __init__(self, inner: Journal, taken: Counter[str]) -> None:
        super().__init__(inner)
        self.taken = taken
        self.mine: set[str] = set()
        self.refused = 0

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        try:
            lease = await self.inner.acquire(
                session, owner, ttl=ttl, create=create, definition=definition
            )
        except LeaseHeldError:
            self.refused += 1
            raise
        self.taken[session] += 1
        self.mine.add(session)
        return lease


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
