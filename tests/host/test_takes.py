"""A claim pass takes its sessions' leases in one ``Journal.acquire_all``:
the free ones at once, those whose owner's lease expired a margin later, and
one refused take gives up that session alone."""

from __future__ import annotations

from collections.abc import Sequence

import trio

from journal import (
    ForwardingJournal,
    Journal,
    LeaseHeldError,
    SessionLease,
    SessionNotFoundError,
)
from session import Client, Host
from tests.host.support import counting_definition, trio_clock_journal, wait_for

DEFS = {"counter": counting_definition()}


class RecordedTakes(ForwardingJournal):
    """Records each ``acquire_all`` (its sessions, in trio time) and counts
    single takes; ``first_taken_by`` has another host take the named session
    just before the first call reaches the journal."""

    def __init__(self, inner: Journal, first_taken_by: tuple[str, str] | None = None) -> None:
        super().__init__(inner)
        self.calls: list[tuple[float, list[str]]] = []
        self.single = 0
        self.first_taken_by = first_taken_by

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        self.calls.append((trio.current_time(), list(sessions)))
        if self.first_taken_by is not None:
            session, other = self.first_taken_by
            self.first_taken_by = None
            await self.inner.acquire(session, other, ttl=3600)
        return await self.inner.acquire_all(sessions, owner, ttl=ttl)

    async def acquire(
        self,
        session: str,
        owner: str,
        *,
        ttl: float,
        create: bool = False,
        definition: str | None = None,
    ) -> SessionLease:
        self.single += 1
        return await self.inner.acquire(
            session, owner, ttl=ttl, create=create, definition=definition
        )


async def _create(client: Client, count: int) -> list[str]:
    sids = [await client.create("counter", key=f"c{i}") for i in range(count)]
    for sid in sids:
        await client.submit(sid, "count", key="s")
    return sids


async def _all_applied(journal: Journal, sids: Sequence[str], key: str) -> None:
    async def applied() -> bool:
        entries = [await journal.entry(sid, key) for sid in sids]
        return all(e is not None and e.consumed for e in entries)

    await wait_for(applied)


async def test_a_pass_takes_its_sessions_in_one_call(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    sids = await _create(Client(journal), 12)
    recorded = RecordedTakes(journal)
    async with Host.open(recorded, DEFS, host_id="h1", poll=0.5, idle_after=3600) as host:
        await _all_applied(journal, sids, "s")
        loaded = host.statistics().loaded
    [(_, taken)] = recorded.calls
    assert sorted(taken) == sorted(sids) and recorded.single == 0
    assert loaded == len(sids)


async def test_expired_leases_are_taken_together_a_margin_after_the_free(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    orphans = await _create(client, 5)
    async with Host.open(journal, DEFS, host_id="first", poll=0.5) as first:
        await _all_applied(journal, orphans, "s")
    for sid in orphans:
        # A dead host's leases: taken, never renewed, expired.
        await journal.acquire(sid, "dead", ttl=1)
    await trio.sleep(2)
    [fresh] = await _create(client, 1)
    for sid in orphans:
        await client.submit(sid, "count", key="again")
    recorded = RecordedTakes(journal)
    async with Host.open(recorded, DEFS, host_id="heir", poll=0.5, idle_after=3600) as heir:
        await _all_applied(journal, [fresh], "s")
        await _all_applied(journal, orphans, "again")
        stats = heir.statistics()
    (at_free, free), (at_expired, expired) = recorded.calls
    assert free == [fresh] and sorted(expired) == sorted(orphans)
    assert at_expired >= at_free + heir.lease_margin > at_free
    assert stats.failovers == len(orphans) and recorded.single == 0
    assert first.statistics().claims == len(orphans)


async def test_one_refused_take_gives_up_that_session_alone(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    sids = await _create(Client(journal), 6)
    lost = sids[2]
    recorded = RecordedTakes(journal, first_taken_by=(lost, "other"))
    async with Host.open(recorded, DEFS, host_id="h1", poll=0.5, idle_after=3600) as host:
        others = [sid for sid in sids if sid != lost]
        await _all_applied(journal, others, "s")
        held = set(host.sessions)
        claims = host.statistics().claims
    assert held == set(others) and claims == len(others)
    entry = await journal.entry(lost, "s")
    assert entry is not None and not entry.consumed  # left to the host holding it
    [info] = [i for i in await journal.sessions() if i.session == lost]
    assert info.owner == "other"
