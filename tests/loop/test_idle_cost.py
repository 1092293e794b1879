"""What making an idle session costs beyond its own objects: no journal read for an
id the session made itself, and no cyclic garbage (which the collector would have
to find by walking every live object, of every session, again and again)."""

from __future__ import annotations

import collections
import gc
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import open_journal
from journal.forwarding import ForwardingJournal
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session, SessionExistsError
from session.writer import IDLE_EXIT


@tool(permission="allow")
async def echo(ctx: ToolContext, *, q: str) -> str:
    """Say it back."""
    return q


def one_step() -> LoopDefinition:
    def script(request: Any) -> Reply:
        if len(request.messages) > 1:
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="echo", input={"q": "x"})])

    return LoopDefinition(name="idle", model=ScriptedModel(script), tools=[echo])


class CountingHeads(ForwardingJournal):
    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.heads = 0

    async def head(self, session: str) -> int:
        self.heads += 1
        return await self.inner.head(session)


@contextmanager
def cyclic_garbage() -> Iterator[list[Any]]:
    """Everything the cyclic collector would have freed, kept for inspection."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


async def test_a_session_made_with_its_own_id_reads_nothing_first() -> None:
    async with open_journal("memory:") as inner:
        journal = CountingHeads(inner)
        async with Session.create(journal, one_step()) as s:
            await s.submit("go")
            await s.wait_idle()
        assert journal.heads == 0
        # A chosen id is still checked before the lease is taken.
        with pytest.raises(SessionExistsError):
            async with Session.create(journal, one_step(), session_id=s.id):
                pass
        assert journal.heads == 1


async def test_making_idle_sessions_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    definition = one_step()
    async with open_journal(f"sqlite:///{tmp_path / 'idle.db'}") as journal:
        async with Session.create(journal, definition) as warm:  # one-off costs
            await warm.submit("go")
            await warm.wait_idle()
        async with AsyncExitStack() as stack:
            with cyclic_garbage() as garbage:
                for _ in range(10):
                    s = await stack.enter_async_context(Session.create(journal, definition))
                    await s.submit("go")
                    await s.wait_idle()
            kinds = collections.Counter(type(o).__qualname__ for o in garbage)
    assert not garbage, kinds.most_common(10)


def writer_tasks(session: Session) -> list[trio.lowlevel.Task]:
    assert session._nursery is not None
    return [t for t in session._nursery.child_tasks if t.name.endswith("Writer.run")]


async def test_an_idle_session_keeps_no_writer_task(autojump_clock: Any) -> None:
    # A slow reply: the call's start is appended on its own after LINGER,
    # by the writer's task, since no barrier comes to take it.
    slow = LoopDefinition(
        name="slow", model=ScriptedModel([Reply(text="done", chunk_delay=1.0)] * 2)
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, slow) as s:
            await s.submit("go")
            await trio.sleep(0.5)
            assert len(writer_tasks(s)) == 1
            await s.wait_idle()
            await trio.sleep(IDLE_EXIT * 2)
            # The writer's task went away (a parked task is about 2 KB)...
            assert writer_tasks(s) == []
            # ...and comes back for the next append that needs it.
            await s.submit("again")
            await trio.sleep(0.5)
            assert len(writer_tasks(s)) == 1
            await s.wait_idle()
            await s.verify()
            assert (await s.snapshot()).turn_index == 2
