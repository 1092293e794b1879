"""Helpers for loop and session tests."""

from __future__ import annotations

from typing import Any

import trio

from journal import Draft, Journal, Record
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session


async def records(journal: Journal, session_id: str) -> list[Record]:
    return [r async for r in journal.read(session_id)]


async def tags(journal: Journal, session_id: str, *, loop: str | None = None) -> list[str]:
    """The event tags of a session, in seq order (one loop's with ``loop``)."""
    return [
        r.event.__struct_config__.tag  # type: ignore[attr-defined]
        for r in await records(journal, session_id)
        if loop is None or r.loop == loop
    ]


async def events_of(journal: Journal, session_id: str, kind: type[Any]) -> list[Any]:
    return [r.event for r in await records(journal, session_id) if isinstance(r.event, kind)]


def squash(seq: list[str], tag: str = "model.output") -> list[str]:
    """Collapse runs of ``tag`` into one (how many chunks arrive is pacing)."""
    out: list[str] = []
    for t in seq:
        if t == tag and out and out[-1] == tag:
            continue
        out.append(t)
    return out


async def crashed_copy(journal: Journal, session_id: str, last: int) -> str:
    """A copy of the session as a crash right after seq ``last`` left it: the
    same drafts, appended in one append to a new session in the same journal."""
    copy = f"{session_id}_crashed"
    lease = await journal.open_session(copy, create=True)
    drafts = [
        Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
        for r in await records(journal, session_id)
        if r.seq <= last
    ]
    await journal.append(lease, drafts, expected_seq=0)
    return copy


@tool(permission="allow")
async def count(ctx: ToolContext, *, n: int) -> str:
    """Counts."""
    return str(n + 1)


def _counting(request: ModelRequest) -> Reply:
    # A tool call, then an answer, every turn.
    last = request.messages[-1]
    if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
        return Reply(text="counted")
    return Reply(tool_calls=[ToolCall(name="count", input={"n": len(request.messages)})])


def counting_definition() -> LoopDefinition:
    """A loop that calls ``count`` once, then answers, every turn."""
    return LoopDefinition(name="counter", model=ScriptedModel(_counting), tools=[count])


async def run_turns(journal: Journal, session_id: str, n: int) -> None:
    """Create ``session_id`` with ``counting_definition`` and run ``n`` turns."""
    async with Session.create(journal, counting_definition(), session_id=session_id) as s:
        for i in range(n):
            await s.submit(f"count {i}")
            await s.wait_idle()


class SpawnedTasks(trio.abc.Instrument):
    """The names of the tasks spawned while it is added."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


class TaskSteps(trio.abc.Instrument):
    """How many times tasks of one name ran while it is added."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1
