"""The progress crash scenario: a tool that is not replay-safe reports its
progress, and is SIGKILLed once the journal holds its reports.

The definition is shared by both processes; ``replay_safe`` chooses whether
the restore runs the call again (its reports then continue under the same
execution id) or leaves it an unknown effect for the host.
"""

from __future__ import annotations

import trio

from journal import Record, open_journal
from journal.content import ToolResult
from journal.events import ToolProgress
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.processes import ready

__all__ = ["REPORTS", "definition", "progress"]

REPORTS = 3
"""Reports the first run makes before it waits to be killed."""


def definition(replay_safe: bool, *, restored: bool = False) -> LoopDefinition:
    """``restored``: the restoring process's tool, which finishes at once."""

    @tool(permission="allow", replay_safe=replay_safe)
    async def migrate(ctx: ToolContext, *, tables: int) -> str:
        """Migrates tables one by one."""
        if restored:
            ctx.progress("again from the start", 0.0)
            return f"migrated {tables} tables"
        for done in range(1, REPORTS + 1):
            ctx.progress(f"table {done} of {tables}", done / tables)
            await trio.sleep(0.3)  # past the interval: each report is a record
        await trio.sleep_forever()
        raise AssertionError("killed before")

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(isinstance(b, ToolResult) for b in last.blocks):
            return Reply(text="done")
        return Reply(tool_calls=[ToolCall(name="migrate", input={"tables": 10})])

    return LoopDefinition(name="migrator", model=ScriptedModel(script), tools=[migrate])


async def progress(url: str, session_id: str, replay_safe: str) -> None:
    """Killed once the journal holds the tool's reports (READY)."""
    async with open_journal(url) as journal:
        d = definition(replay_safe == "yes")
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit("migrate the tables")
            async for r in s.subscribe(after=0):
                if (
                    isinstance(r, Record)
                    and isinstance(r.event, ToolProgress)
                    and r.event.message.startswith(f"table {REPORTS} ")
                ):
                    # Published only once durable: the journal holds it.
                    ready()
                    await trio.sleep_forever()
