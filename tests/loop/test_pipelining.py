"""Pipelined appends: which commits wait for durability, and the rules that hold anyway.

A tool step waits on ``tool.started`` alone; the model's records and the tool's
completion ride in the next durable append.  Nothing is published, answered or
run before the records it depends on are durable (docs/journal.md, "Which
records wait").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio
import trio.testing

from journal import Draft, Record, SessionLease, open_journal
from journal.events import ModelCallStarted, ModelMessageCommitted, ToolCompleted, ToolStarted
from journal.forwarding import ForwardingJournal
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.embedded.durability import may_pipeline
from session.embedded.linger import LINGER
from tests.support.loops import TaskSteps


class DurableHead(ForwardingJournal):
    """The real journal, noting the head each append made durable and the
    events of each append."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.durable = 0
        self.appends: list[list[str]] = []

    async def append(
        self,
        lease: SessionLease,
        drafts: Sequence[Draft],
        *,
        expected_seq: int,
        consumes: Sequence[Any] = (),
    ) -> list[Record]:
        records = await self.inner.append(
            lease, drafts, expected_seq=expected_seq, consumes=consumes
        )
        if records:
            self.durable = max(self.durable, records[-1].seq)
        self.appends.append([type(d.event).__name__ for d in drafts])
        return records


def stepping(n: int, probe: Any = None) -> LoopDefinition:
    calls = {"n": 0}

    def script(_request: Any) -> Reply:
        if calls["n"] >= n:
            return Reply(text="done")
        calls["n"] += 1
        return Reply(tool_calls=[ToolCall(name="look", input={"q": str(calls["n"])})])

    @tool(permission="allow")
    async def look(ctx: ToolContext, *, q: str) -> str:
        """Look something up."""
        if probe is not None:
            await probe(ctx)
        return q

    return LoopDefinition(
        name="steps",
        model=ScriptedModel(script),
        tools=[look],
        limits=Limits(max_model_calls_per_turn=n + 1, max_tool_calls_per_turn=n),
    )


async def test_a_turn_of_one_tool_step_waits_three_times() -> None:
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)
        async with Session.create(journal, stepping(1)) as s:
            before = s.commit_statistics()
            await s.submit("go")
            await s.wait_idle()
            after = s.commit_statistics()
            await s.verify()
    # Waited: the input (with turn.started), tool.started, and the answer with
    # turn.ended.  Pipelined: both model.call_started, the message asking for
    # the tool (with its context.measured), and tool.completed.
    assert after.waits - before.waits == 3
    assert after.pipelined - before.pipelined == 4
    # Pipelined records went to the journal in front of their barrier.
    rode = next(a for a in journal.appends if "ToolStarted" in a)
    assert rode[-1] == "ToolStarted" and "ModelMessageCommitted" in rode


async def test_ten_steps_wait_once_per_step() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(10)) as s:
            before = s.commit_statistics()
            await s.submit("go")
            await s.wait_idle()
            after = s.commit_statistics()
            await s.verify()
    assert after.waits - before.waits == 12


async def test_a_tool_runs_only_once_its_start_and_everything_before_is_durable() -> None:
    seen: list[tuple[int, int]] = []
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)

        async def probe(ctx: ToolContext) -> None:
            records = [r async for r in inner.read(session_id)]
            started = [r for r in records if isinstance(r.event, ToolStarted)]
            assert started and started[-1].event.execution_id == ctx.execution_id
            # The model call and message the call came from are durable too.
            assert isinstance(records[-2].event, ModelMessageCommitted | ToolCompleted) or any(
                isinstance(r.event, ModelCallStarted) for r in records
            )
            seen.append((records[-1].seq, journal.durable))

        async with Session.create(journal, stepping(3, probe)) as s:
            session_id = s.id
            await s.submit("go")
            await s.wait_idle()
    assert len(seen) == 3 and all(last == head for last, head in seen)


async def test_subscribers_only_ever_see_durable_records() -> None:
    early: list[int] = []
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)
        async with Session.create(journal, stepping(5)) as s:
            got: list[int] = []

            async def follow() -> None:
                async for item in s.subscribe(after=0):
                    assert isinstance(item, Record)
                    if item.seq > journal.durable:
                        early.append(item.seq)
                    got.append(item.seq)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await trio.testing.wait_all_tasks_blocked()
                await s.submit("go")
                await s.wait_idle()
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
        head = await inner.head(s.id)
    assert not early
    assert got == list(range(1, head + 1))


async def test_a_snapshot_holds_only_durable_records() -> None:
    states: list[tuple[int, int]] = []
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)
        async with Session.create(journal, stepping(5)) as session:
            done = trio.Event()

            async def watch() -> None:
                # Asks all through the turn, so some snapshots fall while
                # pipelined records are folded and not yet durable.
                while not done.is_set():
                    state = await session.snapshot()
                    states.append((state.last_seq, journal.durable))
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await session.submit("go")
                await session.wait_idle()
                done.set()
            assert session.commit_statistics().pipelined >= 10
    assert len(states) > 3 and all(seq <= head for seq, head in states)


async def test_pipelined_records_with_no_barrier_are_appended_after_linger(
    autojump_clock: Any,
) -> None:
    # The reply takes 10 s to come: nothing that waits follows the call's
    # start, so it goes to the journal on its own once LINGER has passed.
    slow = LoopDefinition(name="slow", model=ScriptedModel([Reply(text="ok", chunk_delay=10.0)]))
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)
        async with Session.create(journal, slow) as s:
            await s.submit("go")
            before = journal.durable
            await trio.sleep(LINGER * 1.5)
            assert journal.appends[-1] == ["ModelCallStarted"]
            assert journal.durable == before + 1
            await s.wait_idle()
            await s.verify()


async def test_a_linger_after_barriers_took_every_earlier_one_still_flushes(
    autojump_clock: Any,
) -> None:
    # A turn whose pipelined commits all rode with barriers leaves the watcher
    # asleep with nothing due; a pipelined commit with no barrier after it
    # must still wake it and reach the journal once LINGER has passed.
    slow = LoopDefinition(name="slow", model=ScriptedModel([Reply(text="ok", chunk_delay=10.0)]))
    async with open_journal("memory:") as inner:
        journal = DurableHead(inner)
        async with Session.create(journal, stepping(3)) as busy:
            await busy.submit("go")
            await busy.wait_idle()
            async with Session.create(journal, slow) as s:
                await s.submit("go")
                before = len(journal.appends)
                await trio.sleep(LINGER * 1.5)
                assert journal.appends[before:] == [["ModelCallStarted"]]
                await s.wait_idle()
                await s.verify()
            await busy.verify()


class WriterTasks(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Writer.run"):
            self.spawned += 1


async def test_pipelined_commits_that_ride_with_barriers_need_no_writer_task() -> None:
    # Each step's pipelined commits are taken by the next commit that waits,
    # appended from the committing task: no writer task, and no timer, runs
    # for them (one shared task per trio run watches every session's LINGER).
    spawned = WriterTasks()
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(5)) as s:
            trio.lowlevel.add_instrument(spawned)
            await s.submit("go")
            await s.wait_idle()
            trio.lowlevel.remove_instrument(spawned)
            assert s.commit_statistics().pipelined >= 10
            await s.verify()
    assert spawned.spawned == 0


async def test_pipelined_commits_taken_by_barriers_wake_no_linger_watcher(
    autojump_clock: Any,
) -> None:
    # Every step's pipelined commits ride with the next step's tool.started,
    # and the last ones with turn.ended: the watcher of LINGER is told each
    # time, so it never wakes to find nothing to flush (it did once a step).
    watcher = TaskSteps("run timer")
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(10)) as s:
            trio.lowlevel.add_instrument(watcher)
            await s.submit("go")
            await s.wait_idle()
            await trio.sleep(LINGER * 3)
            trio.lowlevel.remove_instrument(watcher)
            assert s.commit_statistics().pipelined >= 30
            await s.verify()
    # At most its first step, if this run's first pipelined commit started it.
    assert watcher.steps <= 1


def test_only_commits_that_gate_nothing_outside_the_process_are_pipelined() -> None:
    from journal.content import Message, Text
    from journal.events import ContextMeasured, GateOpened, ModelOutput, TurnEnded

    call = ModelCallStarted(effect_id="e", turn=1, step=1, model="m", fingerprint="f")
    message = ModelMessageCommitted(
        effect_id="e", turn=1, step=1, message=Message(role="assistant", blocks=(Text(text="x"),))
    )
    measured = ContextMeasured(input_tokens=1, output_tokens=1, window=10)
    assert may_pipeline([call])
    assert may_pipeline([message, measured])
    assert may_pipeline(
        [ToolCompleted(execution_id="x", tool_use_id="t", content=(), disposition="succeeded")]
    )
    # Streamed pieces alone wait: a crash keeps what was already shown.
    assert not may_pipeline([ModelOutput(effect_id="e", pieces=())])
    assert may_pipeline([ModelOutput(effect_id="e", pieces=()), message, measured])
    assert not may_pipeline([message, TurnEnded(turn=1, outcome="completed")])
    assert not may_pipeline([ToolStarted(execution_id="x", tool_use_id="t", name="n", input={})])
    assert not may_pipeline([GateOpened(gate_id="g", kind="permission", execution_id="x")])
