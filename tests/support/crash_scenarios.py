"""The small crash scenarios, and the loop definitions the killed child and the restoring
test share.

Rules: a scenario is an async function of string arguments, run in a child process by
``tests.support.crash_child``; it creates its session on the journal at ``url`` and calls
``ready`` when it reaches its kill point, then waits to be killed.  The test restores with
a definition from here, so both processes run loops of the same name, tools and limits.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import trio

from journal import open_journal
from journal.content import Message
from journal.events import GateOpened, ModelOutput, SteerQueued
from loopruntime import Delegate, Limits, LoopDefinition, ToolContext, tool
from loopruntime.model import Model
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.processes import ready

# -- a loop with one tool per kind of in-flight work -----------------------------------


def record_effect(side: Path, **fields: object) -> None:
    with side.open("a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()


def effects(side: Path) -> list[dict[str, object]]:
    """Every tool effect the side file recorded, in order (what ran, and how often)."""
    if not side.exists():
        return []
    return [json.loads(line) for line in side.read_text().splitlines() if line]


def definition(scenario: str, side: Path, replies: list[Reply]) -> LoopDefinition:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy (needs approval)."""
        record_effect(side, tool="deploy", execution=ctx.execution_id)
        return f"deployed {target}"

    @tool(permission="allow", resumable=True)
    async def confirm(ctx: ToolContext, *, question: str) -> str:
        """Ask, then act on the answer (resumable)."""
        record_effect(side, tool="confirm", phase="entered", execution=ctx.execution_id)
        answer = await ctx.ask_user(question, choices=["yes", "no"])
        record_effect(side, tool="confirm", phase="acted", execution=ctx.execution_id)
        return f"user said {answer}"

    @tool(permission="allow")
    async def charge(ctx: ToolContext, *, amount: int) -> str:
        """Charge a card (not replay-safe)."""
        record_effect(side, tool="charge", execution=ctx.execution_id)
        ready()
        await trio.sleep(3600)
        return f"charged {amount}"

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page (idempotent: safe to run again)."""
        record_effect(side, tool="fetch", execution=ctx.execution_id)
        if len(effects(side)) == 1:
            ready()
            await trio.sleep(3600)
        return f"contents of {url}"

    @tool(permission="allow")
    async def survey(ctx: ToolContext, *, question: str) -> str:
        """Ask, then act (NOT resumable)."""
        record_effect(side, tool="survey", execution=ctx.execution_id)
        answer = await ctx.ask_user(question)
        return f"survey says {answer}"

    return LoopDefinition(
        name=f"crash-{scenario}",
        model=ScriptedModel(replies),
        tools=[deploy, confirm, charge, fetch, survey],
    )


SCRIPTS: dict[str, list[Reply]] = {
    "stream": [Reply(text="a long streamed reply " * 20, chunk_size=4, chunk_delay=0.05)],
    "permission": [Reply(tool_calls=[ToolCall(name="deploy", input={"target": "prod"})])],
    "question": [Reply(tool_calls=[ToolCall(name="confirm", input={"question": "go?"})])],
    "effect": [Reply(tool_calls=[ToolCall(name="charge", input={"amount": 7})])],
    "replay": [Reply(tool_calls=[ToolCall(name="fetch", input={"url": "https://example.org"})])],
    "survey": [Reply(tool_calls=[ToolCall(name="survey", input={"question": "why?"})])],
    "steer": [Reply(tool_calls=[ToolCall(name="deploy", input={"target": "staging"})])],
}
"""The model's replies in the child, per scenario: each one's first turn."""

Reaction = Callable[[Session, object], Awaitable[None]]
"""What a tools scenario does with each event its session publishes."""


async def _tools(
    scenario: str, url: str, session_id: str, side: str, react: Reaction | None = None
) -> None:
    async with open_journal(url) as journal:
        d = definition(scenario, Path(side), SCRIPTS[scenario])
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit(f"run the {scenario} scenario")
            async for record in s.subscribe():
                if react is not None:
                    await react(s, getattr(record, "event", None))
            await trio.sleep_forever()


def _ready_at(kind: type) -> Reaction:
    async def react(s: Session, event: object) -> None:
        if isinstance(event, kind):
            ready()

    return react


async def stream(url: str, session_id: str, side: str) -> None:
    """Killed while a reply streams."""
    await _tools("stream", url, session_id, side, _ready_at(ModelOutput))


async def permission(url: str, session_id: str, side: str) -> None:
    """Killed while a tool call waits at its permission gate."""
    await _tools("permission", url, session_id, side, _ready_at(GateOpened))


async def question(url: str, session_id: str, side: str) -> None:
    """Killed while a resumable tool waits on its question to the user."""
    await _tools("question", url, session_id, side, _ready_at(GateOpened))


async def survey(url: str, session_id: str, side: str) -> None:
    """Killed while a tool that is not resumable waits on its question."""
    await _tools("survey", url, session_id, side, _ready_at(GateOpened))


async def effect(url: str, session_id: str, side: str) -> None:
    """Killed while a tool that is not replay-safe runs (the tool says READY)."""
    await _tools("effect", url, session_id, side)


async def replay(url: str, session_id: str, side: str) -> None:
    """Killed while a replay-safe tool runs (the tool says READY)."""
    await _tools("replay", url, session_id, side)


async def steer(url: str, session_id: str, side: str) -> None:
    """Killed with steering queued while the turn waits at a permission gate."""

    async def react(s: Session, event: object) -> None:
        if isinstance(event, GateOpened):
            await s.steer("deploy carefully")
        if isinstance(event, SteerQueued):
            ready()

    await _tools("steer", url, session_id, side, react)


# -- a lead with three researchers -------------------------------------------------------


def team(lead_replies: list[Reply], researcher_reply: Reply) -> LoopDefinition:
    researcher = LoopDefinition(
        name="researcher", model=ScriptedModel(lambda _request: researcher_reply)
    )
    return LoopDefinition(
        name="lead",
        model=ScriptedModel(lead_replies),
        delegates=[
            Delegate(name="research", description="Research one topic", definition=researcher)
        ],
    )


SLOW = Reply(text="researching slowly " * 30, chunk_size=3, chunk_delay=0.05)
FAN_OUT = Reply(
    tool_calls=[ToolCall(name="research", input={"task": f"topic {i}"}) for i in range(3)]
)


async def delegation(url: str, session_id: str) -> None:
    """Killed once the lead's three researchers, started in parallel, all stream."""
    async with open_journal(url) as journal:
        async with Session.create(journal, team([FAN_OUT], SLOW), session_id=session_id) as s:
            await s.submit("research three topics")
            streaming: set[str] = set()
            async for record in s.subscribe():
                if isinstance(getattr(record, "event", None), ModelOutput) and "/" in record.loop:
                    streaming.add(record.loop)
                    if len(streaming) == 3:
                        ready()
            await trio.sleep_forever()


# -- a compaction that never finishes ----------------------------------------------------


class HangingCompactor:
    """Announces that it runs, then never returns."""

    async def summarize(
        self, messages: Sequence[Message], obligations: Sequence[str], *, model: Model
    ) -> str:
        ready()
        await trio.sleep_forever()
        raise AssertionError("unreachable")


def compaction_definition(model: ScriptedModel, compactor: object) -> LoopDefinition:
    """The definition both processes use (same name, same limits)."""
    return LoopDefinition(
        name="crash-compaction",
        model=model,
        limits=Limits(retained_exchanges=1),
        compactor=compactor,  # type: ignore[arg-type]
    )


async def compaction(url: str, session_id: str) -> None:
    """Two exchanges, then a compaction: killed once the compactor works (so
    ``compaction.started`` is durable)."""
    d = compaction_definition(
        ScriptedModel([Reply(text="a1"), Reply(text="a2")]), HangingCompactor()
    )
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id=session_id) as s:
            for text in ("u1", "u2"):
                await s.submit(text)
                await s.wait_idle()
            await s.compact()
            await trio.sleep_forever()
