"""The host on the memory journal, in trio's virtual time: the inbox applied
exactly once, refusals, passivation and activation, takeover after expiry,
a paused host fenced, a clean stop that hands over at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
import trio

from journal import (
    ForwardingJournal,
    HostIdInUseError,
    InboxKeyError,
    Journal,
    LeaseHeldError,
    SessionLease,
)
from journal.events import (
    CommandKeyed,
    GateOpened,
    GateResolved,
    InputQueued,
    LoopStarted,
    ToolStarted,
    TurnEnded,
)
from journal.inbox import Claim, InboxEntry, Wakeup
from loopruntime import InvalidAnswerError, LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import (
    Client,
    CommandRefusedError,
    Host,
    InvalidContentError,
    Session,
    SessionStatus,
    Status,
)
from session.replay import check
from tests.host.support import ask_definition, counting_definition, trio_clock_journal, wait_for
from tests.support.damage import damage_entry
from tests.support.loops import crashed_copy, events_of

DEFS = {"counter": counting_definition(), "asker": ask_definition()}


async def ended_turns(journal: Journal, session_id: str, n: int) -> bool:
    return len(await events_of(journal, session_id, TurnEnded)) >= n


async def started_tool(journal: Journal, session_id: str) -> bool:
    return bool(await events_of(journal, session_id, ToolStarted))


async def opened_gate(journal: Journal, session_id: str) -> bool:
    return bool(await events_of(journal, session_id, GateOpened))


async def test_a_session_created_and_fed_through_the_inbox(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5) as host:
        sid = await client.create("counter", key="c1")
        await client.submit(sid, "count once", key="s1")
        outcome = await client.wait(sid, "s1", timeout=30)
        assert isinstance(outcome.value, str) and outcome.value.startswith("in_")
        await wait_for(lambda: ended_turns(journal, sid, 1))
        assert (await client.wait(sid, "c1", timeout=30)).value == sid
        # The same key again: the stored entry, applied once.
        again = await client.submit(sid, "count once", key="s1")
        assert again.consumed
        with pytest.raises(InboxKeyError):
            await client.submit(sid, "count twice", key="s1")
        await trio.sleep(5)
        queued = await events_of(journal, sid, InputQueued)
        assert [q.input_id for q in queued] == [outcome.value]
        # The submit's entry was consumed by the append that holds its input.
        entry = await journal.entry(sid, "s1")
        assert entry is not None and entry.outcome is not None
        records = [r async for r in journal.read(sid)]
        holder = next(r for r in records if r.id == entry.outcome.record)
        assert isinstance(holder.event, CommandKeyed) and holder.event.key == "s1"
        assert any(r.cause == holder.id and isinstance(r.event, InputQueued) for r in records)
        assert host.statistics().applied == 2
        info = {i.session: i for i in await client.sessions()}[sid]
        assert (info.owner, info.pending) == ("h1", 0)
    report = await check(journal, sid)
    assert report.ok, report


async def test_a_refused_command_is_consumed_with_its_error(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        sid = await client.create("counter", key="c1")
        await client.answer(sid, "gate_nope", "yes", key="a1")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "a1", timeout=30)
        assert caught.value.outcome.error == "GateMismatchError"
        await client.submit(sid, "after the refusal", key="s1")
        await client.wait(sid, "s1", timeout=30)
    assert await events_of(journal, sid, GateResolved) == []


async def test_a_damaged_entry_is_reported_and_skipped(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    sid = await client.create("counter", key="c1")
    await client.submit(sid, "one", key="s1")
    await client.submit(sid, "two", key="s2")
    damage_entry(journal, sid, 2, b"\xc1")
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "s1", timeout=30)
        assert caught.value.outcome.error == "InboxEntryDamaged"
        assert f"inbox entry 2 (key 's1') of session {sid}" in str(caught.value.outcome.message)
        assert "new key" in str(caught.value.outcome.message)
        await client.wait(sid, "s2", timeout=30)
    assert len(await events_of(journal, sid, InputQueued)) == 1


async def test_an_idle_session_is_passivated_and_activated_again(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5, idle_after=10) as host:
        sid = await client.create("asker", key="c1")
        await client.submit(sid, "go", key="s1")
        await wait_for(lambda: opened_gate(journal, sid))
        # Waiting on a person counts as idle: unloaded with its gate kept open.
        await wait_for(lambda: host.statistics().passivations >= 1)
        assert sid not in host.sessions
        info = {i.session: i for i in await client.sessions()}[sid]
        assert info.owner is None
        gate = (await events_of(journal, sid, GateOpened))[0]
        await client.answer(sid, gate.gate_id, "yes", key="a1")
        await client.wait(sid, "a1", timeout=60)
        await wait_for(lambda: ended_turns(journal, sid, 1))
        assert host.statistics().claims == 2
    ended = await events_of(journal, sid, TurnEnded)
    assert [e.outcome for e in ended] == ["completed"]
    report = await check(journal, sid)
    assert report.ok, report


class PausedRenewals(ForwardingJournal):
    """A host's view of the journal while its process is paused (from
    ``paused``): renewals and looks for work wait until ``resumed``."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.paused = False
        self.resumed = trio.Event()

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        if self.paused:
            await self.resumed.wait()
        return await self.inner.renew_all(leases, ttl=ttl)

    async def claimable(
        self, *, definitions: Sequence[str], owner: str | None = None, limit: int = 100
    ) -> list[Claim]:
        if self.paused:
            await self.resumed.wait()
        return await self.inner.claimable(definitions=definitions, owner=owner, limit=limit)


async def test_an_expired_lease_is_taken_over_and_the_paused_owner_fenced(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    paused = PausedRenewals(journal)
    async with Host.open(paused, DEFS, host_id="a", poll=0.5, lease_ttl=3) as a:
        sid = await client.create("counter", key="c1")
        await client.wait(sid, "c1", timeout=30)
        paused.paused = True
        # Host a renews no more: its lease expires in 3 s of trio time.
        async with Host.open(journal, DEFS, host_id="b", poll=0.5, lease_ttl=3) as b:
            await wait_for(lambda: b.statistics().failovers >= 1)
            await client.submit(sid, "count", key="s1")
            await client.wait(sid, "s1", timeout=30)
            # Host a stopped the session's work at its deadline, a margin
            # before its lease expired, and took nothing back once resumed.
            await wait_for(lambda: sid not in a.sessions)
            paused.resumed.set()
            assert (a.statistics().expired, a.statistics().fenced) == (1, 0)
            await wait_for(lambda: ended_turns(journal, sid, 1))
            info = {i.session: i for i in await client.sessions()}[sid]
            assert info.owner == "b"
    assert len(await events_of(journal, sid, LoopStarted)) == 1
    assert len(await events_of(journal, sid, InputQueued)) == 1
    report = await check(journal, sid)
    assert report.ok, report


def slow_definition(release: trio.Event) -> LoopDefinition:
    @tool(permission="allow")
    async def slow(ctx: ToolContext) -> str:
        """Takes a while."""
        await release.wait()
        return "done"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="finished")
        return Reply(tool_calls=[ToolCall(name="slow")])

    return LoopDefinition(name="slow", model=ScriptedModel(script), tools=[slow])


async def test_a_clean_stop_hands_a_busy_session_over_at_once(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    defs = {"slow": slow_definition(trio.Event())}
    async with Host.open(journal, defs, host_id="a", poll=0.5, lease_ttl=3600):
        sid = await client.create("slow", key="c1")
        await client.submit(sid, "go", key="s1")
        await wait_for(lambda: started_tool(journal, sid))
    # Stopped mid-turn: the lease is left expired for the next host ...
    info = {i.session: i for i in await client.sessions()}[sid]
    assert (info.owner, info.expires_at) == ("a", 0)
    async with Host.open(journal, defs, host_id="b", poll=0.5, lease_ttl=3600) as b:
        # ... which takes it long before a's hour would have passed.
        with trio.fail_after(60):
            await wait_for(lambda: b.statistics().claims == 1)
    # An idle session is released, not handed over: nobody takes it until it has work.
    info = {i.session: i for i in await client.sessions()}[sid]
    assert info.owner is None


async def test_a_session_whose_definition_no_host_has_waits(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, {"counter": counting_definition()}, host_id="h1", poll=0.5):
        sid = await client.create("asker", key="c1")
        with pytest.raises(TimeoutError, match="waits in the inbox"):
            await client.wait(sid, "c1", timeout=5)
    info = {i.session: i for i in await client.sessions()}[sid]
    assert (info.pending, info.definition, info.owner) == (1, "asker", None)
    async with Host.open(journal, DEFS, host_id="h2", poll=0.5):
        assert (await client.wait(sid, "c1", timeout=5)).value == sid


async def test_bad_input_to_the_client_and_the_host(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    with pytest.raises(ValueError, match="idempotency key"):
        await client.create("counter", key="")
    with pytest.raises(ValueError, match="lease_ttl"):
        Host(journal, DEFS, lease_ttl=0)
    with pytest.raises(ValueError, match="its own name"):
        Host(journal, {"other": counting_definition()})
    sid = await client.create("counter", key="c1")
    with pytest.raises(InvalidContentError):
        await client.steer(sid, 3, key="k")  # type: ignore[arg-type]
    with pytest.raises(InvalidAnswerError):
        await client.decide(sid, "gate_1", "no", key="k")  # type: ignore[arg-type]
    assert [e.number for e in await journal.inbox(sid)] == [1]
    with pytest.raises(KeyError):
        await client.wait(sid, "never-sent", timeout=1)
    # A session a host owns refuses a direct writer, with what to do instead.
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5, lease_ttl=3600):
        await client.wait(sid, "c1", timeout=30)
        with pytest.raises(LeaseHeldError, match="loopruntime submit"):
            async with Session.restore(journal, sid, counting_definition()):
                pass
        # The id of a live host is refused once it renews its registration,
        # before anything is claimed.
        with pytest.raises(HostIdInUseError, match="give this host another id"):
            async with Host.open(journal, DEFS, host_id="h1"):
                pass


async def test_a_command_delivered_twice_makes_one_effect(autojump_clock: object) -> None:
    # The key an inbox entry carries is the key its Session command is sent
    # with: a command the session already holds (here delivered once straight
    # to the session, then through the inbox) is answered from the fold.
    journal = trio_clock_journal()
    client = Client(journal)
    async with Session.create(journal, counting_definition()) as direct:
        sid = direct.id
        first = await direct.submit("count once", key="s1")
        await direct.wait_idle()
        await direct.steer("and mind the time", key="t1")
        await direct.wait_idle()
        attempt = await direct.compact(key="k1")
        await direct.wait_idle()
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        await client.submit(sid, "count once", key="s1")
        assert (await client.wait(sid, "s1", timeout=30)).value == first
        await client.compact(sid, key="k1")
        assert (await client.wait(sid, "k1", timeout=30)).value == attempt
        # Other content under a held key is refused, nothing committed.
        await client.steer(sid, "mind something else", key="t1")
        with pytest.raises(CommandRefusedError) as caught:
            await client.wait(sid, "t1", timeout=30)
        assert caught.value.outcome.error == "IdempotencyKeyError"
    assert [q.input_id for q in await events_of(journal, sid, InputQueued)] == [first]
    assert len(await events_of(journal, sid, CommandKeyed)) == 3
    report = await check(journal, sid)
    assert report.ok, report


async def test_every_command_is_consumed_by_its_keyed_record(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        sid = await client.create("counter", key="c1")
        await client.submit(sid, "count", key="s1")
        await client.wait(sid, "s1", timeout=30)
        await wait_for(lambda: ended_turns(journal, sid, 1))
        await client.compact(sid, key="k1")
        await client.interrupt(sid, key="i1")
        await client.change_mode(sid, None, key="m1")
        for key in ("s1", "k1", "i1", "m1"):
            await client.wait(sid, key, timeout=30)
    records = {r.id: r for r in [r async for r in journal.read(sid)]}
    for key in ("s1", "k1", "i1", "m1"):
        entry = await journal.entry(sid, key)
        assert entry is not None and entry.outcome is not None, key
        holder = records[entry.outcome.record or ""]
        assert isinstance(holder.event, CommandKeyed) and holder.event.key == key
        assert entry.outcome.value == holder.event.result


async def test_sessions_say_what_each_session_is_doing(autojump_clock: object) -> None:
    # "running" only while the owner's lease is live; the same turn left by a
    # host that went away is crashed and unowned.
    journal = trio_clock_journal()
    client = Client(journal)
    release = trio.Event()
    defs = {"slow": slow_definition(release), **DEFS}

    def by_id(found: list[SessionStatus]) -> dict[str, SessionStatus]:
        return {s.session: s for s in found}

    paused = PausedRenewals(journal)
    async with Host.open(paused, defs, host_id="a", poll=0.5, lease_ttl=3, idle_after=600):
        slow = await client.create("slow", key="c1")
        await client.submit(slow, "go", key="s1")
        asks = await client.create("asker", key="c1")
        await client.submit(asks, "go", key="s1")
        idle = await client.create("counter", key="c1")
        await wait_for(lambda: started_tool(journal, slow))
        await wait_for(lambda: opened_gate(journal, asks))
        await client.wait(idle, "c1", timeout=30)
        now = by_id(await client.sessions())
        assert now[slow].status is Status.RUNNING and now[slow].live
        assert now[slow].owner == "a"
        assert now[asks].status is Status.WAITING_ON_PERSON
        assert now[idle].status is Status.IDLE
        # Host a stops renewing (paused): past its lease the open turn is nobody's.
        paused.paused = True
        await trio.sleep(4)
        now = by_id(await client.sessions())
        assert now[slow].status is Status.CRASHED and not now[slow].live
        assert "owner a is gone" in now[slow].detail
        # A command for a definition no host runs waits, and says why.
        lost = await client.create("nobody-runs-this", key="c1")
        await trio.sleep(2)
        waiting = by_id(await client.sessions())[lost]
        assert waiting.status is Status.WAITING_FOR_HOST
        assert "no live host serves definition 'nobody-runs-this'" in waiting.detail
        release.set()
        paused.resumed.set()


async def test_an_unknown_effect_is_shown_as_such(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    async with Session.create(journal, counting_definition()) as s:
        await s.submit("count")
        await s.wait_idle()
    [started] = [r.seq async for r in journal.read(s.id) if isinstance(r.event, ToolStarted)]
    crashed = await crashed_copy(journal, s.id, started)
    async with Session.restore(journal, crashed, counting_definition()) as restored:
        await restored.wait_idle()
        listed = {x.session: x for x in await Client(journal).sessions()}
    assert listed[crashed].status is Status.UNKNOWN_EFFECTS
    assert "loopruntime resolve" in listed[crashed].detail


async def test_a_host_id_is_free_again_once_its_host_stopped(autojump_clock: object) -> None:
    journal = trio_clock_journal()
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        assert [(h.host, h.live) for h in await journal.hosts()] == [("h1", True)]
    assert await journal.hosts() == []
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5):
        [info] = await journal.hosts()
        assert info.definitions == ("asker", "counter")


async def test_max_sessions_passivates_the_least_recently_busy_idle_session(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    release = trio.Event()
    defs = {"slow": slow_definition(release), **DEFS}
    async with Host.open(
        journal, defs, host_id="h1", poll=0.5, idle_after=3600, max_sessions=2
    ) as h:
        first = await client.create("asker", key="c1")
        await client.submit(first, "go", key="s1")
        await wait_for(lambda: opened_gate(journal, first))
        second = await client.create("asker", key="c1")
        await client.submit(second, "go", key="s1")
        await wait_for(lambda: opened_gate(journal, second))
        assert set(h.sessions) == {first, second}
        # Both wait on a person (idle): the one idle longest makes room.
        third = await client.create("counter", key="c1")
        await client.submit(third, "count", key="s1")
        await client.wait(third, "s1", timeout=60)
        assert set(h.sessions) == {second, third}
        assert h.statistics().passivations == 1
        # Its gate stayed open: answered, it comes back (in the place of the
        # idle one that has waited longest now).
        gate = (await events_of(journal, first, GateOpened))[0]
        await client.answer(first, gate.gate_id, "yes", key="a1")
        await client.wait(first, "a1", timeout=60)
        await wait_for(lambda: ended_turns(journal, first, 1))
        assert h.statistics().passivations == 2
        assert first in h.sessions and len(h.sessions) == 2
    for sid in (first, second, third):
        report = await check(journal, sid)
        assert report.ok, report


async def test_a_host_full_of_work_claims_nothing_until_a_session_is_idle(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    release = trio.Event()
    defs = {"slow": slow_definition(release), **DEFS}
    async with Host.open(
        journal, defs, host_id="h1", poll=0.5, idle_after=3600, max_sessions=2
    ) as h:
        busy = []
        for _ in range(2):
            sid = await client.create("slow", key="c1")
            await client.submit(sid, "go", key="s1")
            await wait_for(lambda sid=sid: started_tool(journal, sid))  # type: ignore[misc]
            busy.append(sid)
        waiting = await client.create("counter", key="c1")
        await client.submit(waiting, "count", key="s1")
        await trio.sleep(60)
        # Every loaded session has work: nothing is passivated, nothing claimed.
        assert set(h.sessions) == set(busy)
        assert (h.statistics().claims, h.statistics().passivations) == (2, 0)
        listed = {s.session: s for s in await client.sessions()}[waiting]
        assert listed.status is Status.WAITING_FOR_HOST
        release.set()
        await client.wait(waiting, "s1", timeout=60)
        await wait_for(lambda: ended_turns(journal, waiting, 1))
        assert h.statistics().passivations == 1
        for sid in busy:
            await wait_for(lambda sid=sid: ended_turns(journal, sid, 1))  # type: ignore[misc]


async def test_many_sessions_through_a_small_host(autojump_clock: object) -> None:
    # Twenty sessions, room for three: each is activated, passivated under
    # pressure and activated again, every command applied once.
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(
        journal, DEFS, host_id="h1", poll=0.5, idle_after=3600, max_sessions=3
    ) as h:
        sids = [await client.create("counter", key="c1") for _ in range(20)]
        for round_ in (1, 2):
            for sid in sids:
                await client.submit(sid, f"count {round_}", key=f"s{round_}")
            for sid in sids:
                await client.wait(sid, f"s{round_}", timeout=600)
                await wait_for(lambda sid=sid, n=round_: ended_turns(journal, sid, n))  # type: ignore[misc]
            assert len(h.sessions) <= 3
        stats = h.statistics()
        # Every claim past the three it holds now was ended by a passivation,
        # and sessions came back after one (more than one passivation each on average).
        assert stats.claims - stats.passivations == len(h.sessions) == 3
        assert stats.passivations > 20
    for sid in sids:
        assert len(await events_of(journal, sid, InputQueued)) == 2
        report = await check(journal, sid)
        assert report.ok, report


async def test_a_host_wakes_on_a_put_rather_than_its_poll(autojump_clock: object) -> None:
    # The poll is an hour: only the journal's wake-ups bring the commands in.
    journal = trio_clock_journal()
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=3600, idle_after=7200):
        await trio.sleep(1)  # the first look for work is over: the host waits its hour
        with trio.fail_after(5):
            sid = await client.create("counter", key="c1")
            await client.wait(sid, "c1")
            await client.submit(sid, "count", key="s1")
            await client.wait(sid, "s1")


class CountedInbox(ForwardingJournal):
    """Counts each session's inbox reads; with ``wakeups=False`` the journal
    tells of no put (as SQLite between processes)."""

    def __init__(self, inner: Journal, *, wakeups: bool = True) -> None:
        super().__init__(inner)
        self.reads: dict[str, int] = {}
        self.wakeups = wakeups

    async def inbox(self, session: str, *, after: int = 0) -> list[InboxEntry]:
        self.reads[session] = self.reads.get(session, 0) + 1
        return await self.inner.inbox(session, after=after)

    async def inbox_wakeups(self) -> AsyncIterator[Wakeup]:
        if self.wakeups:
            async for wakeup in self.inner.inbox_wakeups():
                yield wakeup
        else:
            yield Wakeup(session="")
            await trio.sleep_forever()


async def test_a_quiet_session_does_not_read_its_inbox_every_poll(autojump_clock: object) -> None:
    # One read per loaded session per poll was most of a host's work: a quiet
    # session waits to be woken, and reads on its own only every lease_ttl / 3.
    journal = CountedInbox(trio_clock_journal())
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.05, lease_ttl=30, idle_after=600):
        sid = await client.create("counter", key="c1")
        await client.submit(sid, "count", key="s1")
        await wait_for(lambda: ended_turns(journal, sid, 1))
        await trio.sleep(1)
        before = journal.reads[sid]
        await trio.sleep(20)  # 400 polls of the host; two of lease_ttl / 3
        assert journal.reads[sid] - before <= 3
        with trio.fail_after(1):  # a put still wakes it at once
            await client.submit(sid, "count again", key="s2")
            await client.wait(sid, "s2")


async def test_a_quiet_session_is_woken_by_the_claimers_pass(autojump_clock: object) -> None:
    # No wake-ups from the journal and a lease_ttl / 3 of 100 s: the host's one
    # pass over the claimable sessions, every poll, finds the entry.
    journal = CountedInbox(trio_clock_journal(), wakeups=False)
    client = Client(journal)
    async with Host.open(journal, DEFS, host_id="h1", poll=0.5, lease_ttl=300, idle_after=600):
        sid = await client.create("counter", key="c1")
        await client.submit(sid, "count", key="s1")
        await wait_for(lambda: ended_turns(journal, sid, 1))
        await trio.sleep(5)
        with trio.fail_after(2):
            await client.submit(sid, "count again", key="s2")
            await client.wait(sid, "s2")


@pytest.mark.parametrize("wakeups", [True, False])
async def test_a_session_taken_over_at_rest_reads_its_inbox_once_there_is_work(
    autojump_clock: object, wakeups: bool
) -> None:
    # The claim found nothing waiting: the heir reads no inbox for it until a
    # put wakes it, or, with no wake-ups from the journal (SQLite between
    # processes), until the claimer's pass finds the entry.  The passes
    # during the lease margin list it too (the expired lease is not taken
    # yet): they wake no session with nothing waiting.
    journal = trio_clock_journal()
    client = Client(journal)
    paused = PausedRenewals(journal)
    async with Host.open(paused, DEFS, host_id="a", poll=0.5, lease_ttl=3) as a:
        sid = await client.create("counter", key="c1")
        await client.wait(sid, "c1", timeout=30)
        paused.paused = True
        counted = CountedInbox(journal, wakeups=wakeups)
        async with Host.open(
            counted, DEFS, host_id="b", poll=0.1, lease_ttl=3, idle_after=600
        ) as b:
            await wait_for(lambda: sid in b.sessions and b.sessions[sid].session is not None)
            assert b.statistics().failovers == 1
            assert counted.reads.get(sid, 0) == 0
            with trio.fail_after(1.5):  # a wake-up at once, else the next pass
                await client.submit(sid, "count", key="s1")
                await client.wait(sid, "s1")
            assert counted.reads[sid] >= 1
            paused.resumed.set()
            await wait_for(lambda: sid not in a.sessions)
    await wait_for(lambda: ended_turns(journal, sid, 1))
    report = await check(journal, sid)
    assert report.ok, report
