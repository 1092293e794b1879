"""What a turn costs in tasks (benchmarks/README.md has the figures): the turn runs
in the actor's own task once the mailbox is empty, the actor parked meanwhile,
so a command arriving during the turn starts a new serving task;
and the loop's other tasks run in the session's nursery."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from journal import open_journal
from journal.content import Message
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.lifecycle import Phase
from loopruntime.model import Model
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.loops import SpawnedTasks

from .test_pipelining import stepping


async def test_a_turn_of_a_parked_loop_spawns_one_task_the_actors() -> None:
    # The serving task the input starts runs the turn and takes its end: no task of
    # the turn's own, and no nursery of the actor's (whose exit is a schedule
    # point of its own).
    spawned = SpawnedTasks()
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(2)) as s:
            trio.lowlevel.add_instrument(spawned)
            try:
                for text in ("one", "two", "three"):
                    await s.submit(text)
                    await s.wait_idle()
            finally:
                trio.lowlevel.remove_instrument(spawned)
            state = await s.snapshot()
            await s.verify()
    assert state.turn_index == 3 and state.last_outcome == "completed"
    loops = [n for n in spawned.names if "loopruntime." in n]
    assert loops == ["loopruntime.actor.Loop._act"] * 3, loops


async def test_commands_during_a_turn_run_in_another_serving_task_while_the_turn_goes_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    release = trio.Event()
    entered = trio.Event()

    @tool(permission="allow")
    async def slow(ctx: ToolContext, *, q: str) -> str:
        entered.set()
        await release.wait()
        return q

    model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="slow", input={"q": "x"})]), Reply(text="done")]
    )
    definition = LoopDefinition(name="a", model=model, tools=[slow])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            loop = s.loops["main"]
            await s.submit("go")
            await entered.wait()
            await trio.testing.wait_all_tasks_blocked()
            # The turn runs in the task that started it, the actor parked.
            assert loop.parked and loop.phase is Phase.TURN
            # A command is taken by a serving task of its own while the tool waits.
            assert await s.steer("and then") is not None
            state = await s.snapshot()
            assert state.turn_open and len(state.steering) == 1
            release.set()
            await s.wait_idle()
            state = await s.snapshot()
            await s.verify()
        assert state.last_outcome == "completed" and not state.turn_open
        # The steering went into the same turn, whose end the turn's task took.
        assert state.turn_index == 1 and not state.steering
        assert loop.phase is Phase.STOPPED


class Endless:
    """A compactor that never answers; says whether it was cancelled."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.cancelled = False

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        self.entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


async def test_finishing_a_loop_cancels_its_running_compaction(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The compaction runs in the session's nursery, not in one of the actor's
    # that a stop would cancel: the loop's stop cancels it by its own scope.
    compactor = Endless()
    definition = LoopDefinition(
        name="a",
        model=ScriptedModel([Reply(text=f"a{i}") for i in range(3)]),
        limits=Limits(retained_exchanges=1),
        compactor=compactor,
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            for text in ("u1", "u2", "u3"):
                await s.submit(text)
                await s.wait_idle()
            await s.compact()
            await compactor.entered.wait()
            await s.loops["main"].finish()
            await trio.testing.wait_all_tasks_blocked()
            assert compactor.cancelled
            # The session goes on, its loop stopped.
            assert (await journal.head(s.id)) > 0
