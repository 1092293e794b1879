"""A host's passes for work woken by the journal's wake-ups: a put for a
session another host holds wakes every host, and each may look for work once
per ``_CLAIM_GAP`` at most, not once per put; such a pass leaves the sessions
held here to their own wake-ups (issue 39: with a pass per put anywhere, each
waking the host's own sessions again, two hosts spent twice the CPU of one on
the same turns)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import trio
import trio.testing

from journal import ForwardingJournal, Journal
from journal.inbox import Claim
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


async def test_puts_for_a_session_held_elsewhere_wake_a_host_once_per_gap(
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
            # One pass for the ten wake-ups (two if the first came before the gap
            # began); a pass per put would be ten, all finding nothing to take.
            assert other.passes - before <= 2
            assert sid not in bystander.sessions
    assert holder.statistics().applied >= 11  # the create and every put, by the holder


async def _consumed(journal: Journal, sid: str) -> bool:
    return not await journal.inbox(sid)


class Deaf(ForwardingJournal):
    """Hears no wake-up for one session: its notifications are lost."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.deaf_to = ""

    async def inbox_wakeups(self) -> AsyncIterator[str]:  # type: ignore[override]
        async for session in self.inner.inbox_wakeups():
            if session != self.deaf_to or not session:
                yield session


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
