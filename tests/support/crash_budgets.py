"""A turn under a token budget, killed while a tool runs between its model
calls: the definition the killed child and the restoring test share."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from journal import open_journal
from journal.content import Usage
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.processes import ready

TURN_BUDGET = 1000
SESSION_BUDGET = 1100


def costly(n: int) -> Reply:
    """A reply asking for ``fetch`` that spends 600 tokens."""
    usage = Usage(input_tokens=500, output_tokens=100)
    return Reply(tool_calls=[ToolCall(name="fetch", input={"page": n})], usage=usage)


SCRIPT = [costly(1), costly(2), Reply(text="read both", usage=Usage(output_tokens=10))]
"""The turn's replies: the budget admits two model calls, never the third."""


def _note(side: Path, page: int) -> bool:
    """Write down a run of ``fetch``; whether it is the first ever."""
    first = not side.exists()
    with side.open("a") as f:
        f.write(json.dumps({"page": page}) + "\n")
    return first


def definition(side: Path) -> LoopDefinition:
    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, page: int) -> str:
        """Read a page (safe to run again); its first run ever waits to be killed."""
        if _note(side, page):
            ready()
            await trio.sleep(3600)
        return f"page {page}"

    return LoopDefinition(
        name="crash-budget",
        model=ScriptedModel(SCRIPT),
        tools=[fetch],
        limits=Limits(max_turn_tokens=TURN_BUDGET, max_session_tokens=SESSION_BUDGET),
    )


async def run(url: str, session_id: str, side: str) -> None:
    """URL SESSION_ID SIDE_FILE: killed while the turn's first tool call runs,
    600 tokens of its budget spent."""
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(Path(side)), session_id=session_id) as s:
            await s.submit("read two pages")
            await trio.sleep_forever()
