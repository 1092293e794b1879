"""A host's passes for work woken by the journal's wake-ups: a put for a
session another host's live lease holds costs other hosts no pass (the
wake-up names the holder); other wake-ups cost a host one pass per
``_CLAIM_GAP`` at most, not one per put, and such a pass leaves the sessions
held here to their own wake-ups (issue 39: with a pass per put anywhere, each
waking the host's own sessions again, two hosts spent twice the CPU of one on
the same turns)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import trio
import trio.testing

from journal import ForwardingJournal, Journal
from journal.inbox import Claim, Wakeup
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Client, Host
from tests.host.support import counting_definition, trio_clock_journal, wait_for

DEFS = {"counter": counting_definition()}


class CountedPasses(ForwardingJournal):
    """Counts a host's passes for work (its ``claimable`` calls)."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.passes = 0

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        self.passes += 1
        return await self.inner.claimable(definitions=definitions, owner=owner, limit=limit)


async def test_puts_for_a_session_another_host_holds_cost_a_bystander_no_pass(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    other = CountedPasses(journal)
    async with Host.open(journal, DEFS, host_id="holder", poll=60, lease_ttl=30) as holder:
        sid = await client.create("counter", key="c")
        await wait_for(lambda: sid in holder.sessions and holder.sessions[sid].session is not None)
        async with Host.open(other, DEFS, host_id="other", poll=60, lease_ttl=30) as bystander:
            await trio.sleep(1)  # its first pass is done
            before = other.passes
            started = trio.current_time()
            for i in range(10):
                await client.submit(sid, f"count {i}", key=f"s{i}")
                await trio.testing.wait_all_tasks_blocked()
            assert trio.current_time() == started  # ten puts within one instant
            await wait_for(lambda: _consumed(journal, sid))
            await trio.sleep(1)
            # Each wake-up names the live holder: a pass could take nothing.
            assert other.passes == before
            assert sid not in bystander.sessions
    assert holder.statistics().applied >= 11  # the create and every put, by the holder


async def test_puts_for_sessions_nobody_holds_wake_a_host_once_per_gap(
    autojump_clock: object,
) -> None:
    journal = CountedPasses(trio_clock_journal())
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h", poll=60, lease_ttl=30) as host:
        await trio.sleep(1)  # its first pass is done
        before = journal.passes
        started = trio.current_time()
        sids = [await client.create("counter", key=f"c{i}") for i in range(10)]
        assert trio.current_time() == started  # ten puts within one instant
        await wait_for(lambda: all(sid in host.sessions for sid in sids))
        # Claimed well before the poll, by one pass for the ten wake-ups (two
        # if the first came before the gap began), not one pass per put.
        assert trio.current_time() - started < 1
        assert journal.passes - before <= 2


async def test_a_put_for_a_session_whose_holder_died_is_claimed_at_the_poll(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    counted = CountedPasses(journal)
    sid = await client.create("counter", key="c")
    # A host that took the session and died: its lease runs out in 10 s.
    await journal.acquire(sid, "dead", ttl=10)
    async with Host.open(counted, DEFS, host_id="heir", poll=20, lease_ttl=30) as heir:
        await trio.sleep(1)  # its first pass is done, finding the lease live
        before = counted.passes
        started = trio.current_time()
        await client.submit(sid, "count", key="s1")
        await trio.testing.wait_all_tasks_blocked()
        assert counted.passes == before  # the wake-up named a live holder
        await wait_for(lambda: _consumed(journal, sid))
        # The poll's pass after the lease expired took it over.
        assert trio.current_time() - started <= 20 + 3 + 1  # the poll and the lease margin
        assert heir.statistics().failovers == 1
        assert heir.statistics().applied == 2  # the create and the submit


async def test_a_put_for_a_session_nobody_holds_is_claimed_before_the_poll(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h", poll=60, lease_ttl=30, idle_after=5) as host:
        sid = await client.create("counter", key="c")
        await wait_for(lambda: _consumed(journal, sid))
        await wait_for(lambda: host.statistics().passivations == 1)  # released at rest
        await trio.sleep(1)  # the pass its release asked for is done
        started = trio.current_time()
        await client.submit(sid, "count", key="s1")
        await wait_for(lambda: _consumed(journal, sid))
        assert trio.current_time() - started < 1
        assert host.statistics().claims == 2


async def _consumed(journal: Journal, sid: str) -> bool:
    return not await journal.inbox(sid)


class Deaf(ForwardingJournal):
    """Hears no wake-up for one session: its notifications are lost."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.deaf_to = ""

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:  # type: ignore[override]
        async for wakeup in self.inner.inbox_wakeups():
            if wakeup.session != self.deaf_to or not wakeup.session:
                yield wakeup


async def test_a_pass_woken_for_another_hosts_session_leaves_held_ones_to_their_wake_ups(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    echo = LoopDefinition(name="echo", model=ScriptedModel(lambda request: Reply(text="ok")))
    deaf = Deaf(journal)
    async with Host.open(journal, DEFS, host_id="holder", poll=60, lease_ttl=30) as holder:
        elsewhere = await client.create("counter", key="c")
        await wait_for(lambda: _consumed(journal, elsewhere))
        mine = f"{elsewhere}-mine"
        deaf.deaf_to = mine
        async with Host.open(deaf, {**DEFS, "echo": echo}, host_id="other", poll=60, lease_ttl=30):
            await client.create("echo", session_id=mine, key="c")
            await wait_for(lambda: _consumed(journal, mine))  # found by its poll
            await client.submit(mine, "lost wake-up", key="s")
            await trio.testing.wait_all_tasks_blocked()
            started = trio.current_time()
            # A put anywhere wakes this host's pass, which lists its own session's
            # entry too; the session is left to its own wake-up (lost here) and
            # the pass every poll, not woken again by every pass a put elsewhere asks for.
            await client.submit(elsewhere, "count 1", key="s1")
            await wait_for(lambda: _consumed(journal, elsewhere))
            await trio.sleep(1)
            assert not await _consumed(journal, mine)
            await wait_for(lambda: _consumed(journal, mine))
            assert trio.current_time() - started <= 60 + 1  # the next pass of its poll
        assert elsewhere in holder.sessions
