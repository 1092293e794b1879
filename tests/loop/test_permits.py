"""The run's limit on loops working at once (``loopruntime/permits.py``): never
more loops inside than permits, none held through a wait outside the runtime,
and nothing lost or deadlocked when a loop waits for one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from journal import open_journal
from journal.content import ToolResult
from journal.events import TurnEnded
from journal.forwarding import ForwardingJournal
from journal.record import Draft, Record
from journal.store import Journal, SessionLease
from loopruntime import Delegate, LoopDefinition, ModelRequest, limit_working_loops, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.permits import DEFAULT_LIMIT, Permits
from loopruntime.tools import ToolContext
from session import Session
from session.replay import check
from tests.support.loops import records


@tool(permission="allow")
async def lookup(ctx: ToolContext, *, query: str) -> str:
    """Answer at once."""
    return query


def _one_step(request: ModelRequest) -> Reply:
    """One tool step, then the answer."""
    if any(isinstance(block, ToolResult) for block in request.messages[-1].blocks):
        return Reply(text="done")
    return Reply(tool_calls=[ToolCall(name="lookup", input={"query": "q"})])


def _stepping() -> LoopDefinition:
    return LoopDefinition(name="stepper", model=ScriptedModel(_one_step), tools=[lookup])


class SlowAppends(ForwardingJournal):
    """Each append takes a millisecond of (virtual) time; counts how many
    sessions had an append in flight at once."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.inside: dict[str, int] = {}
        self.most = 0
        self.hold: dict[str, trio.Event] = {}
        """Sessions whose appends wait for the event (a commit kept in flight)."""

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Any] = (),
    ) -> list[Record]:
        session = lease.session
        self.inside[session] = self.inside.get(session, 0) + 1
        self.most = max(self.most, len(self.inside))
        try:
            gate = self.hold.get(session)
            if gate is not None:
                await gate.wait()
            await trio.sleep(0.001)
            return await self.inner.append(
                lease, drafts, expected_seq=expected_seq, consumes=consumes
            )
        finally:
            self.inside[session] -= 1
            if not self.inside[session]:
                del self.inside[session]


@pytest.mark.parametrize(("limit", "most"), [(2, 2), (100, 5)])
async def test_no_more_loops_commit_at_once_than_permits(
    autojump_clock: trio.abc.Clock, limit: int, most: int
) -> None:
    # A loop keeps its permit while its commit is in flight, so the sessions
    # with an append in flight at once are at most the permits; without the
    # limit (100 permits) all five are.
    limit_working_loops(limit)
    async with open_journal("memory:") as inner:
        journal = SlowAppends(inner)
        sessions: list[Session] = []
        created, done, finished = trio.Event(), trio.Event(), trio.Event()
        most_seen: list[int] = []
        ran: list[str] = []

        async def one() -> None:
            async with Session.create(journal, _stepping()) as s:
                sessions.append(s)
                if len(sessions) == 5:
                    created.set()
                await created.wait()
                for _ in range(3):
                    await s.submit("go")
                    await s.wait_idle()
                ran.append(s.id)
                if len(ran) == 5:
                    done.set()
                await finished.wait()

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(one)
            # Counted from when every session is made (its first records
            # are committed by the task making it, which is no loop's).
            await created.wait()
            journal.most = 0
            await done.wait()
            most_seen.append(journal.most)
            finished.set()
        for s in sessions:
            ended = [r.event for r in await records(inner, s.id) if isinstance(r.event, TurnEnded)]
            assert [e.outcome for e in ended] == ["completed"] * 3
            assert (await check(inner, s.id)).ok
    assert most_seen == [most]
    assert Permits.of_this_run().holders == 0


async def test_a_loop_waiting_on_a_model_holds_no_permit(autojump_clock: trio.abc.Clock) -> None:
    limit_working_loops(1)
    stalled = LoopDefinition(
        name="stalled", model=ScriptedModel([Reply(text="late", chunk_delay=10_000.0)])
    )
    async with open_journal("memory:") as journal:
        async with (
            Session.create(journal, stalled) as waiting,
            Session.create(journal, _stepping()) as working,
        ):
            await waiting.submit("never answered")
            await trio.sleep(1)
            # Nobody else wants it: the stalled stream keeps its permit...
            assert Permits.of_this_run().holders == 1
            # ... until another loop asks, HOLD later.
            await working.submit("go")
            with trio.fail_after(60):
                await working.wait_idle()
            await trio.sleep(1)  # the working loop's actor parks
            # The stalled stream gave its permit up for good.
            assert Permits.of_this_run().holders == 0
            assert await waiting.interrupt()
            await waiting.wait_idle()
        assert (await check(journal, working.id)).ok
        assert (await check(journal, waiting.id)).ok


async def test_a_loop_cancelled_while_waiting_for_a_permit_loses_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    limit_working_loops(1)
    async with open_journal("memory:") as inner:
        journal = SlowAppends(inner)
        async with Session.create(journal, _stepping()) as first:
            await first.submit("go")
            # The first loop's next commits stay in flight, its permit with them.
            gate = journal.hold[first.id] = trio.Event()
            await trio.sleep(1)
            assert Permits.of_this_run().holders == 1
            with trio.CancelScope() as scope:
                async with Session.create(journal, _stepping()) as second:
                    second_id = second.id
                    submitted = trio.Event()

                    async def submit() -> None:
                        await second.submit("go")
                        submitted.set()

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(submit)
                        await trio.sleep(5)
                        # The second loop's actor waits for the permit.
                        assert Permits.of_this_run().waiting == 1
                        assert not submitted.is_set()
                        scope.cancel()
            assert Permits.of_this_run().waiting == 0
            gate.set()
            del journal.hold[first.id]
            await first.wait_idle()
        assert (await check(inner, first.id)).ok
        assert (await check(inner, second_id)).ok
        # Restored, the second session works as if nothing had happened.
        async with Session.restore(inner, second_id, _stepping()) as again:
            await again.submit("again")
            await again.wait_idle()
        assert (await check(inner, second_id)).ok
    assert Permits.of_this_run().holders == 0


async def test_a_parent_waiting_on_its_child_holds_no_permit(
    autojump_clock: trio.abc.Clock,
) -> None:
    # One permit: the parent's tool waits on the child, which needs it; and
    # interrupting the parent has its actor wait for the child's settling.
    limit_working_loops(1)
    slow = Reply(text="digging " * 20, chunk_size=4, chunk_delay=1.0)
    child = LoopDefinition(name="digger", model=ScriptedModel([Reply(text="found"), slow]))
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [
                Reply(tool_calls=[ToolCall(name="dig", input={"task": "dig"})]),
                Reply(text="it was found"),
                Reply(tool_calls=[ToolCall(name="dig", input={"task": "dig again"})]),
            ]
        ),
        delegates=[Delegate(name="dig", description="Dig", definition=child)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            with trio.fail_after(600):
                await s.submit("dig")
                await s.wait_idle()
                await s.submit("dig again")
                await trio.sleep(3)
                assert await s.interrupt()
                await s.wait_idle()
        recs = await records(journal, s.id)
        assert (await check(journal, s.id)).ok
    outcomes = [
        r.event.outcome for r in recs if isinstance(r.event, TurnEnded) and r.loop == "main"
    ]
    assert outcomes == ["completed", "interrupted"]
    assert Permits.of_this_run().holders == 0


async def test_the_limit_is_refused_when_bad_or_late(autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(ValueError, match="at least one permit"):
        limit_working_loops(0)
    with pytest.raises(ValueError, match="0 or more"):
        limit_working_loops(4, hold=-1.0)
    assert Permits.of_this_run().limit == DEFAULT_LIMIT
    limit_working_loops(4)
    assert Permits.of_this_run().limit == 4
    async with open_journal("memory:") as inner:
        journal = SlowAppends(inner)
        async with Session.create(journal, _stepping()) as s:
            await s.submit("go")
            gate = journal.hold[s.id] = trio.Event()
            await trio.sleep(1)
            with pytest.raises(RuntimeError, match="before the run's first loop starts"):
                limit_working_loops(8)
            gate.set()
            del journal.hold[s.id]
            await s.wait_idle()


async def test_a_loop_interrupted_while_waiting_for_a_permit_loses_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    limit_working_loops(1)
    async with open_journal("memory:") as inner:
        journal = SlowAppends(inner)
        async with (
            Session.create(journal, _stepping()) as first,
            Session.create(journal, _stepping()) as second,
        ):
            await second.submit("go")
            await second.wait_idle()
            await first.submit("go")
            gate = journal.hold[first.id] = trio.Event()
            await trio.sleep(1)
            answers: list[bool] = []

            async def submit_then_interrupt() -> None:
                await second.submit("again")
                answers.append(await second.interrupt())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(submit_then_interrupt)
                await trio.sleep(5)
                assert Permits.of_this_run().waiting == 1  # the second loop's actor
                assert answers == []
                gate.set()
                del journal.hold[first.id]
            await first.wait_idle()
            await second.wait_idle()
        recs = await records(inner, second.id)
        assert (await check(inner, second.id)).ok
        assert (await check(inner, first.id)).ok
    outcomes = [r.event.outcome for r in recs if isinstance(r.event, TurnEnded)]
    assert outcomes[0] == "completed" and len(outcomes) == 2
    assert answers == [outcomes[1] == "interrupted"]
    assert Permits.of_this_run().holders == 0
