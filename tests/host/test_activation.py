"""Activation reads a passivated session once: the definition the journal
keeps beside its lease names what to restore it with; a session without one
(run by ``Session`` before any host) is read to learn it."""

from __future__ import annotations

from journal import TAIL_LIMIT, Checkpointed, ForwardingJournal, Journal
from journal.events import TurnEnded
from session import Client, Host, Session
from session.replay import check
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.support.loops import events_of

DEFS = {"counter": counting_definition()}


class CountedReads(ForwardingJournal):
    """Counts reads of a session's checkpoints: one per fold of it."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.folds = 0

    async def read_checkpointed(
        self, session: str, *, tail_limit: int = TAIL_LIMIT
    ) -> Checkpointed:
        self.folds += 1
        return await self.inner.read_checkpointed(session, tail_limit=tail_limit)


async def turns(journal: Journal, session_id: str) -> int:
    return len(await events_of(journal, session_id, TurnEnded))


async def test_a_passivated_session_is_read_once_to_activate_it(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    counted = CountedReads(journal)
    client = Client(journal)
    async with Host.open(counted, DEFS, host_id="h", poll=0.5, idle_after=10) as host:
        sid = await client.create("counter", key="c")
        await client.wait(sid, "c", timeout=60)
        await wait_for(lambda: host.statistics().passivations >= 1)
        before = counted.folds
        await client.submit(sid, "count", key="s")
        await client.wait(sid, "s", timeout=60)
        await wait_for(lambda: turns(journal, sid))
        assert host.statistics().claims == 2
        assert counted.folds - before == 1


async def test_a_session_no_host_ran_is_read_for_its_definition(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    async with Session.create(journal, counting_definition()) as session:
        sid = session.id
    counted = CountedReads(journal)
    client = Client(journal)
    async with Host.open(counted, DEFS, host_id="h", poll=0.5, idle_after=3600) as host:
        await client.submit(sid, "count", key="s")
        await client.wait(sid, "s", timeout=60)
        await wait_for(lambda: turns(journal, sid))
        assert host.statistics().claims == 1
        # Once for its definition, once by the restore.
        assert counted.folds == 2


async def test_a_session_with_a_long_tail_is_checkpointed_when_passivated(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h", poll=0.5, idle_after=10) as host:
        short = await client.create("counter", key="c")
        await client.wait(short, "c", timeout=60)
        long = await client.create("counter", key="c")
        await client.wait(long, "c", timeout=60)
        n = 0
        while await journal.head(long) < 120:
            n += 1
            await client.submit(long, "count", key=f"s{n}")
            await client.wait(long, f"s{n}", timeout=60)
            await wait_for(lambda n=n: turns_at_least(journal, long, n))
        await wait_for(lambda: host.statistics().passivations >= 2)
        # The long one's last record is its checkpoint: its next activation
        # folds nothing after it.  The short one (under 100 records) got none.
        head = await journal.head(long)
        assert [r.seq for r in await journal.checkpoints(long)] == [head]
        assert await journal.checkpoints(short) == []
        await client.submit(long, "count", key="again")
        await client.wait(long, "again", timeout=60)
        await wait_for(lambda: turns_at_least(journal, long, n + 1))
    report = await check(journal, long)
    assert report.ok, report


async def turns_at_least(journal: Journal, session_id: str, n: int) -> bool:
    return await turns(journal, session_id) >= n
