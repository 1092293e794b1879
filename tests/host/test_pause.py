"""Pause and resume through a host: the inbox's ``pause`` / ``resume``, a pause
that holds on the next host after a handover, and refusals consumed once."""

from __future__ import annotations

import pytest
import trio

from journal.events import (
    LoopPaused,
    LoopResumed,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from session import Client, CommandRefusedError, Host, Status
from session.replay import check
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.host.test_host import PausedRenewals, slow_definition
from tests.support.loops import events_of

DEFS = {"counter": counting_definition()}


async def test_a_pause_sent_through_the_inbox_holds_on_the_next_host(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="a", poll=0.5):
        sid = await client.create("counter", key="c1")
        await client.pause(sid, key="p1", principal="ops")
        assert (await client.wait(sid, "p1", timeout=30)).value is True
        await client.pause(sid, key="p2")
        assert (await client.wait(sid, "p2", timeout=30)).value is False
    # Host a is gone; host b takes the session when work arrives, restores
    # it from the journal, and the pause holds there: the input only queues.
    async with Host.open(journal, DEFS, host_id="b", poll=0.5):
        await client.submit(sid, "count", key="s1")
        await client.wait(sid, "s1", timeout=30)
        status = {s.session: s for s in await client.sessions()}[sid]
        assert status.status is Status.PAUSED and "resume" in status.detail
        assert await events_of(journal, sid, TurnStarted) == []
        await client.resume(sid, key="r1", principal="ops")
        assert (await client.wait(sid, "r1", timeout=30)).value is True

        async def one_turn() -> bool:
            return len(await events_of(journal, sid, TurnStarted)) == 1

        await wait_for(one_turn)
        info = {i.session: i for i in await client.sessions()}[sid]
        assert info.owner == "b"
    [paused] = await events_of(journal, sid, LoopPaused)
    [resumed] = await events_of(journal, sid, LoopResumed)
    assert paused.principal == resumed.principal == "ops"
    report = await check(journal, sid)
    assert report.ok, report


async def test_a_pause_of_an_unknown_loop_is_consumed_once_with_its_reason(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="a", poll=0.5) as host:
        sid = await client.create("counter", key="c1")
        await client.pause(sid, key="p1", loop="nope")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "p1", timeout=30)
        assert caught.value.outcome.error == "UnknownLoopError"
        assert "has no loop 'nope'" in str(caught.value.outcome.message)
        entry = await journal.entry(sid, "p1")
        assert entry is not None and entry.consumed
        await client.submit(sid, "count", key="s1")
        await client.wait(sid, "s1", timeout=30)
        applied = host.statistics().applied
    assert applied >= 2
    assert await events_of(journal, sid, LoopPaused) == []


async def test_a_turn_held_by_a_pause_fails_over_still_held_and_the_resume_finishes_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    release = trio.Event()
    defs = {"slow": slow_definition(release)}
    frozen = PausedRenewals(journal)

    async def recorded(kind: type) -> bool:
        return bool(await events_of(journal, sid, kind))

    async with Host.open(frozen, defs, host_id="a", poll=0.5, lease_ttl=3) as a:
        sid = await client.create("slow", key="c1")
        await client.submit(sid, "go", key="s1")
        await wait_for(lambda: recorded(ToolStarted))
        await client.pause(sid, key="p1")
        await client.wait(sid, "p1", timeout=30)
        release.set()  # the running tool finishes; the turn's next step waits
        await wait_for(lambda: recorded(ToolCompleted))
        # Host a stops renewing: past its lease, host b takes the session over.
        frozen.paused = True
        async with Host.open(journal, defs, host_id="b", poll=0.5, lease_ttl=3) as b:
            await wait_for(lambda: b.statistics().failovers >= 1)
            await wait_for(lambda: sid not in a.sessions)
            frozen.resumed.set()
            status = {s.session: s for s in await client.sessions()}[sid]
            assert status.status is Status.PAUSED and status.owner == "b"
            assert await events_of(journal, sid, TurnEnded) == []
            await client.resume(sid, key="r1")
            await client.wait(sid, "r1", timeout=30)
            await wait_for(lambda: recorded(TurnEnded))
    assert [e.outcome for e in await events_of(journal, sid, TurnEnded)] == ["completed"]
    assert len(await events_of(journal, sid, TurnStarted)) == 1
    report = await check(journal, sid)
    assert report.ok, report
