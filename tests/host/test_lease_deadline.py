"""A session's work stops at its lease's deadline: a host whose renewals fail
cancels a running tool before its next step, even when the tool's own sleep
ends at that very moment; a tool may ask ``ctx.check_owner()``; a takeover of
an expired lease waits a margin; a release lost to another host says so.

Time: trio's ``autojump_clock`` and the memory journal on it (a host whose
renewals fail stands for a host paused past its lease)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from structlog.testing import capture_logs

from journal import (
    ForwardingJournal,
    Journal,
    JournalError,
    LeaseHeldError,
    SessionLease,
    SessionNotFoundError,
    open_journal,
)
from journal.events import ToolCompleted, ToolStarted
from loopruntime import LeaseLostError, LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Client, Host, Session
from tests.host.support import counting_definition, trio_clock_journal, wait_for
from tests.support.loops import events_of, run_turns

TTL = 30.0


class Renewals(ForwardingJournal):
    """Refuses every renewal while ``failing``; records when each take was
    sent and counts the renewal rounds that went through."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.failing = False
        self.takes: list[float] = []
        self.renewed = 0

    async def renew_all(
        self, leases: Sequence[SessionLease], *, ttl: float
    ) -> list[SessionLease | None]:
        if self.failing:
            raise JournalError("renewals refused (the host stands for one paused past its lease)")
        renewed = await self.inner.renew_all(leases, ttl=ttl)
        self.renewed += 1
        return renewed

    async def acquire_all(
        self, sessions: Sequence[str], owner: str, *, ttl: float
    ) -> list[SessionLease | LeaseHeldError | SessionNotFoundError]:
        self.takes.extend(trio.current_time() for _ in sessions)
        return await self.inner.acquire_all(sessions, owner, ttl=ttl)


class Effects:
    """What the test's tool did: the effect it performed, what it saw."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.seen: list[BaseException] = []
        self.host: Host | None = None
        self.go = False
        """What the ``poll`` tool waits for before its effect."""
        self.polling: trio.lowlevel.Task | None = None
        """The task of the ``poll`` tool while it sleeps between two looks
        (of the ``event`` tool while it waits)."""
        self.told = trio.Event()
        """What the ``event`` tool waits for before its effect."""
        self.resumed = 0


def effect_definition(effects: Effects, how: str) -> LoopDefinition:
    """``charger``: every turn calls ``charge`` once (not replay-safe), then answers.

    ``how``: ``sleep`` sleeps past two lease TTLs before its effect;
    ``deadline`` sleeps until exactly its host's deadline for the session;
    ``shielded`` works 2 TTLs in a stretch nothing can cancel, then asks
    ``ctx.check_owner()`` before its effect; ``poll`` looks at ``effects.go``
    every second until it is set; ``event`` waits for ``effects.told``, then
    asks ``ctx.check_owner()``."""

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, amount: int) -> str:
        """Charge a card."""
        if how == "deadline":
            assert effects.host is not None
            hosted = next(iter(effects.host.sessions.values()))
            await trio.sleep_until(hosted.scope.deadline)
        elif how == "shielded":
            with trio.CancelScope(shield=True):  # a blocking call in a thread, say
                await trio.sleep(2 * TTL)
            try:
                ctx.check_owner()
            except LeaseLostError as exc:
                effects.seen.append(exc)
                raise
        elif how == "poll":
            while not effects.go:
                effects.polling = trio.lowlevel.current_task()
                await trio.sleep(1)
                effects.polling = None
        elif how == "event":
            effects.polling = trio.lowlevel.current_task()
            await effects.told.wait()
            effects.resumed += 1  # the step after the wait ran
            try:
                ctx.check_owner()
            except LeaseLostError as exc:
                effects.seen.append(exc)
                raise
        else:
            await trio.sleep(2 * TTL)
        effects.done.append(ctx.execution_id)
        return f"charged {amount}"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="charged")
        return Reply(tool_calls=[ToolCall(name="charge", input={"amount": 5})])

    return LoopDefinition(name="charger", model=ScriptedModel(script), tools=[charge])


async def run_until_the_deadline(
    how: str, effects: Effects | None = None
) -> tuple[Effects, Renewals, list[dict[str, object]]]:
    """A host whose renewals fail from the start runs ``charge``; back once
    the deadline stopped it."""
    effects = effects or Effects()
    journal = Renewals(trio_clock_journal())
    journal.failing = True
    defs = {"charger": effect_definition(effects, how)}
    with capture_logs() as logs, trio.fail_after(3600):  # a hang guard, in virtual time
        async with Host.open(journal, defs, host_id="a", lease_ttl=TTL, poll=0.5) as host:
            effects.host = host
            client = Client(journal.inner)
            sid = await client.create("charger", key="c")
            await client.submit(sid, "charge it", key="s")
            await wait_for(lambda: host.statistics().expired == 1)
            # Its work stopped before the lease expired: a margin was left.
            started = await events_of(journal.inner, sid, ToolStarted)
            assert len(started) == 1
            assert await events_of(journal.inner, sid, ToolCompleted) == []
            journal.failing = False
            await host.aclose()
    return effects, journal, logs


async def test_a_host_whose_renewals_fail_stops_a_tool_before_its_effect(
    autojump_clock: object,
) -> None:
    effects, _, logs = await run_until_the_deadline("sleep")
    assert effects.done == []
    stopped = [e for e in logs if e["event"] == "session_stopped"]
    assert [e["reason"] for e in stopped] == ["lease_deadline"]


async def test_a_tool_whose_sleep_ends_at_the_deadline_does_not_win(
    autojump_clock: object,
) -> None:
    # Both the tool's sleep and the session's scope expire at the same
    # moment: trio delivers Cancelled to the outermost cancelled scope, the
    # session's, so the tool never reaches its next step.
    effects, _, _ = await run_until_the_deadline("deadline")
    assert effects.done == []


class Pause(trio.abc.Instrument):
    """A SIGSTOP at the worst moment, in virtual time: the poll tool's sleep
    ended and trio scheduled its task, then the process stops before that task
    steps; it wakes 3 TTLs later, with ``go`` set meanwhile (another host took
    the session and the operator settled the call)."""

    def __init__(self, effects: Effects, clock: trio.testing.MockClock) -> None:
        self.effects, self.clock = effects, clock
        self.paused = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.effects.polling and not self.paused:
            self.paused = True
            self.clock.jump(3 * TTL)
            self.effects.go = True


async def test_a_host_woken_past_its_deadline_stops_a_tool_before_its_next_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Trio looks at its deadlines once per batch of task steps; a pause
    # between that look and the tool's step must not let the step run.
    effects = Effects()
    pause = Pause(effects, autojump_clock)
    trio.lowlevel.add_instrument(pause)
    try:
        effects, _, logs = await run_until_the_deadline("poll", effects)
    finally:
        trio.lowlevel.remove_instrument(pause)
    assert pause.paused
    assert effects.done == []
    stopped = [e for e in logs if e["event"] == "session_stopped"]
    assert [e["reason"] for e in stopped] == ["lease_deadline"]


async def test_a_wait_that_returned_before_the_pause_runs_its_step_where_check_owner_stops_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # What the per-step check cannot reach (docs/host.md): the tool's event
    # was set, so its task was scheduled with the wait's value, and then the
    # host paused past its deadline.  The step runs (a scope cannot take back
    # a value already delivered) up to the tool's own check before its effect.
    effects = Effects()
    pause = Pause(effects, autojump_clock)

    async def tell() -> None:
        await wait_for(lambda: effects.polling is not None)
        effects.told.set()

    trio.lowlevel.add_instrument(pause)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tell)
            effects, _, _ = await run_until_the_deadline("event", effects)
    finally:
        trio.lowlevel.remove_instrument(pause)
    assert pause.paused and effects.resumed == 1
    assert effects.done == []
    [lost] = effects.seen
    assert isinstance(lost, LeaseLostError) and lost.reason == "its lease ran out before a renewal"


async def test_a_session_stopped_at_its_deadline_is_taken_again_and_stopped_no_more(
    autojump_clock: object,
) -> None:
    # The per-step check reads each held session's own scope: a session
    # stopped at its deadline and taken again by the same host (a new scope),
    # then renewed, leaves no stale deadline that would stop it again.
    effects = Effects()
    journal = Renewals(trio_clock_journal())
    journal.failing = True
    defs = {"charger": effect_definition(effects, "poll")}
    with capture_logs() as logs:
        async with Host.open(journal, defs, host_id="a", lease_ttl=TTL, poll=0.5) as host:
            client = Client(journal.inner)
            sid = await client.create("charger", key="c")
            await client.submit(sid, "charge it", key="s")
            await wait_for(lambda: host.statistics().expired == 1)
            journal.failing = False
            # Taken again once its lease expired: its call is an unknown
            # effect now, and the session stays loaded, renewed round by round.
            await wait_for(lambda: host.statistics().claims == 2 and sid in host.sessions)
            renewed = journal.renewed
            await wait_for(lambda: journal.renewed >= renewed + 9)  # three TTLs of renewals
            assert host.statistics().expired == 1
            assert host.sessions[sid].lease is not None
    assert effects.done == []
    stopped = [e for e in logs if e["event"] == "session_stopped"]
    assert [e["reason"] for e in stopped] == ["lease_deadline"]


async def test_a_host_on_sqlite_under_the_autojump_clock_is_refused(
    tmp_path: Path, autojump_clock: object
) -> None:
    # The cause of the stops in a loop that the per-step check was blamed
    # for: under the autojump clock virtual time runs on while a SQLite commit
    # runs in its thread, past the host's deadlines, while the journal's
    # leases run on the wall clock.  tests/support/clocks.py refuses the pair.
    async with open_journal(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        with pytest.raises(pytest.fail.Exception, match="run this test in real time"):
            Host(ForwardingJournal(journal), {})
    Host(trio_clock_journal(), {})  # leases on trio's clock: taken


async def test_check_owner_raises_once_the_lease_ran_out(autojump_clock: object) -> None:
    effects, _, _ = await run_until_the_deadline("shielded")
    assert effects.done == []
    [lost] = effects.seen
    assert isinstance(lost, LeaseLostError)
    assert (lost.host, lost.reason) == ("a", "its lease ran out before a renewal")
    assert "stop before the effect" in str(lost)


async def test_renewals_push_the_deadline_and_check_owner_passes(autojump_clock: object) -> None:
    effects = Effects()
    journal = Renewals(trio_clock_journal())
    defs = {"charger": effect_definition(effects, "shielded")}
    async with Host.open(journal, defs, host_id="a", lease_ttl=TTL, poll=0.5) as host:
        client = Client(journal.inner)
        sid = await client.create("charger", key="c")
        await client.submit(sid, "charge it", key="s")
        await client.wait(sid, "s", timeout=None)
        await wait_for(lambda: len(effects.done) == 1)
        assert host.statistics().expired == 0
    assert effects.seen == []


async def test_check_owner_outside_a_host_does_nothing(autojump_clock: object) -> None:
    effects = Effects()
    journal = trio_clock_journal()
    async with Session.create(journal, effect_definition(effects, "shielded")) as session:
        await session.submit("charge it")
        await session.wait_idle()
    assert len(effects.done) == 1 and effects.seen == []


async def test_a_takeover_waits_a_margin_past_the_expired_lease(autojump_clock: object) -> None:
    inner = trio_clock_journal()
    await run_turns(inner, "s1", 1)
    # Its host went away holding it (a crash, or a pause past the lease).
    sid = (await inner.acquire("s1", "gone", ttl=TTL)).session
    expiry = trio.current_time() + TTL
    await Client(inner).submit(sid, "count", key="k")
    journal = Renewals(inner)
    defs = {"counter": counting_definition()}
    async with Host.open(journal, defs, host_id="b", lease_ttl=TTL, poll=0.5) as b:
        await wait_for(lambda: b.statistics().failovers == 1)
    [taken] = journal.takes
    assert taken >= expiry + b.lease_margin


async def test_a_release_lost_to_another_host_is_not_a_passivation(
    autojump_clock: object,
) -> None:
    journal = trio_clock_journal()
    client = Client(journal)
    defs = {"counter": counting_definition()}
    with capture_logs() as logs:
        async with Host.open(
            journal, defs, host_id="a", lease_ttl=TTL, poll=0.5, idle_after=2
        ) as host:
            sid = await client.create("counter", key="c")
            await client.wait(sid, "c", timeout=None)
            # Taken again meanwhile (its incarnation moved), before a renewal
            # round could tell the host: its idle passivation finds it gone.
            await journal.acquire(sid, "a", ttl=TTL)
            await wait_for(lambda: sid not in host.sessions)
            assert host.statistics().passivations == 0
    events = [(e["event"], e.get("session")) for e in logs]
    assert ("session_passivated", sid) not in events
    assert ("lease_release_failed", sid) not in events
    [lost] = [e for e in logs if e["event"] == "session_lost"]
    assert lost["detail"] == "lost to another host"


@pytest.mark.parametrize("value", [0, -1.0])
async def test_a_lease_margin_is_a_share_of_the_ttl(value: float) -> None:
    with pytest.raises(ValueError, match="lease_ttl"):
        Host(trio_clock_journal(), {}, lease_ttl=value)
    assert Host(trio_clock_journal(), {}, lease_ttl=20).lease_margin == pytest.approx(2.0)
