"""A child process for crash tests: runs a scenario, says READY, gets SIGKILLed.

Usage: python -m tests.support.crash_child SCENARIO JOURNAL_URL SESSION_ID SIDE_FILE

It creates the session, submits the scenario's input, prints ``READY`` once the
scenario reaches its kill point, and then waits to be killed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from journal import open_journal
from journal.events import GateOpened, ModelOutput, SteerQueued
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session


def record_effect(side: Path, **fields: object) -> None:
    with side.open("a") as f:
        f.write(json.dumps(fields) + "\n")
        f.flush()


def effects(side: Path) -> list[dict[str, object]]:
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
        print("READY", flush=True)
        await trio.sleep(3600)
        return f"charged {amount}"

    @tool(permission="allow", replay_safe=True)
    async def fetch(ctx: ToolContext, *, url: str) -> str:
        """Read a page (idempotent: safe to run again)."""
        record_effect(side, tool="fetch", execution=ctx.execution_id)
        if len(effects(side)) == 1:
            print("READY", flush=True)
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


async def main(scenario: str, url: str, session_id: str, side: Path) -> None:
    async with open_journal(url) as journal:
        d = definition(scenario, side, SCRIPTS[scenario])
        async with Session.create(journal, d, session_id=session_id) as s:
            await s.submit(f"run the {scenario} scenario")
            async for record in s.subscribe():
                event = getattr(record, "event", None)
                if (scenario == "stream" and isinstance(event, ModelOutput)) or (
                    scenario in ("permission", "question", "survey")
                    and isinstance(event, GateOpened)
                ):
                    print("READY", flush=True)
                if scenario == "steer" and isinstance(event, GateOpened):
                    # Steering sent while the turn waits at the gate.
                    await s.steer("deploy carefully")
                if scenario == "steer" and isinstance(event, SteerQueued):
                    print("READY", flush=True)
            await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
