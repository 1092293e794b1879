"""The crash scenario of pause and resume, and the definition the killed child
and the restoring test share: a loop paused while its tool ran, killed once the
tool's completion is durable and the turn waits for the resume."""

from __future__ import annotations

import trio

from journal import open_journal
from journal.events import ToolCompleted
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.host.support import wait_for
from tests.support.processes import ready

__all__ = ["definition", "paused_mid_turn"]


def definition(
    entered: trio.Event | None = None, release: trio.Event | None = None
) -> LoopDefinition:
    """A loop that calls ``slow`` once, then answers.  ``slow`` says it
    entered and waits for ``release`` (None: it returns at once)."""

    @tool(permission="allow", replay_safe=True)
    async def slow(ctx: ToolContext) -> str:
        """Takes its time."""
        if entered is not None:
            entered.set()
        if release is not None:
            await release.wait()
        return "slow done"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="after the pause")
        return Reply(tool_calls=[ToolCall(name="slow")])

    return LoopDefinition(name="pausing", model=ScriptedModel(script), tools=[slow])


async def paused_mid_turn(url: str, session_id: str) -> None:
    """Pause while ``slow`` runs, let it finish, and say READY once its
    completion is durable (the turn's next step then waits for the resume)."""
    entered, release = trio.Event(), trio.Event()
    async with open_journal(url) as journal:
        async with Session.create(
            journal, definition(entered, release), session_id=session_id
        ) as s:
            await s.submit("go")
            await entered.wait()
            assert await s.pause(principal="ops")
            release.set()

            async def completed() -> bool:
                # Pipelined: durable with the next barrier, or once it lingered.
                return any(
                    [
                        r
                        async for r in journal.read(session_id)
                        if isinstance(r.event, ToolCompleted)
                    ]
                )

            await wait_for(completed, poll=0.01)
            ready()
            await trio.sleep(3600)
