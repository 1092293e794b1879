"""The run's flush timer (``loopruntime/timers.py``) wakes only for a flush
that is due: entries cancelled by their streams' ends wake nobody."""

from __future__ import annotations

from typing import Any

import trio

from journal import open_journal
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.loops import TaskSteps, tags

from .test_pipelining import stepping


async def _a_tenth_of_a_second(_ctx: Any) -> None:
    await trio.sleep(0.1)


def slow_steps(n: int) -> LoopDefinition:
    """``n`` tool steps of 0.1 s each, so the turn outlasts many flush deadlines."""
    return stepping(n, probe=_a_tenth_of_a_second)


async def test_model_calls_whose_streams_end_in_time_never_wake_the_flush_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Each model call puts a flush deadline 250 ms ahead and cancels it when
    # its stream ends at once; the turn lasts 2 s.  The clock's task ran for
    # each cancelled deadline it slept until (about one a step).
    clock = TaskSteps("run timer")
    async with open_journal("memory:") as journal:
        async with Session.create(journal, slow_steps(20)) as s:
            trio.lowlevel.add_instrument(clock)
            await s.submit("go")
            await s.wait_idle()
            await trio.sleep(1.0)
            trio.lowlevel.remove_instrument(clock)
            await s.verify()
    # At most its first step, if this turn's first model call started it.
    assert clock.steps <= 1


async def test_a_flush_after_every_earlier_deadline_was_cancelled_still_comes(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The clock, left with no deadline by the first turn, must still wake for
    # the slow block of the second one.
    slow = Reply(text="x" * 40, chunk_size=1, chunk_delay=0.1)
    d = LoopDefinition(
        name="then-slow",
        model=ScriptedModel(
            [Reply(tool_calls=[ToolCall(name="look", input={"q": "1"})]), Reply(text="ok"), slow]
        ),
        tools=slow_steps(1).tools,
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("first")
            await s.wait_idle()
            before = (await tags(journal, s.id)).count("model.output")
            await s.submit("second")
            await trio.sleep(1.05)
            mid = (await tags(journal, s.id)).count("model.output")
            await s.wait_idle()
            await s.verify()
    assert mid - before >= 3


def _task_names(task: trio.lowlevel.Task) -> list[str]:
    names = [task.name]
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            names += _task_names(child)
    return names


async def test_stream_flushes_and_the_writers_linger_share_the_runs_one_timer() -> None:
    # A step's flush deadline comes behind its linger deadline: on one timer
    # it changes no trio deadline (on a timer of its own it changed two).
    async with open_journal("memory:") as journal:
        async with Session.create(journal, stepping(3)) as s:
            await s.submit("go")
            await s.wait_idle()
            assert s.commit_statistics().pipelined >= 6
            names = _task_names(trio.lowlevel.current_root_task())
    timers = [
        n for n in names if n in ("run timer", "loops' stream flushes", "session writers' linger")
    ]
    assert timers == ["run timer"]
