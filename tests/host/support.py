"""What the host tests share: a memory journal on trio's clock, definitions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg
import trio

from journal.memory import MemoryJournal
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from tests.support.loops import counting_definition

__all__ = ["ask_definition", "counting_definition", "trio_clock_journal", "wait_for"]


def trio_clock_journal() -> MemoryJournal:
    """A memory journal whose leases expire in trio's (virtual) time."""
    return MemoryJournal(clock=lambda: int(trio.current_time() * 1e9))


@tool(permission="allow", resumable=True)
async def confirm(ctx: ToolContext, *, what: str) -> str:
    """Asks a person."""
    return await ctx.ask_user(f"confirm {what}?")


def ask_definition() -> LoopDefinition:
    """A loop whose every turn asks a person through ``confirm``, then answers."""

    def script(request: object) -> Reply:
        last = request.messages[-1]  # type: ignore[attr-defined]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="confirm", input={"what": "it"})])

    return LoopDefinition(name="asker", model=ScriptedModel(script), tools=[confirm])


async def wait_for(predicate: Callable[[], Awaitable[bool] | bool], *, poll: float = 0.1) -> None:
    """Wait (in trio time) until ``predicate()`` holds: a state of the journal or
    a host's statistics, never a span of time."""
    # Polled: a journal written by other tasks or processes has no event to wait on.
    while True:
        held = predicate()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        await trio.sleep(poll)


def waiting_on_a_lock(conninfo: str) -> int:
    """How many PostgreSQL backends of this database wait on a lock now."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
        assert row is not None
        return int(row[0])
