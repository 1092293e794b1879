"""Tools from an MCP server, a plain tool, and a typed answer, in one loop.

The loop offers the model the `temperature` tool of the MCP server in
examples/servers/weather_server.py (started over stdio, as `weather__temperature`),
a plain `@tool`, and the final-answer tool for the `Trip` type.  The scripted
model asks for both tools, gives an answer that does not validate, is told which
field is wrong, and answers again; `Session.result()` returns the `Trip`, read
back from the journal.  Needs the extra `loopruntime[mcp]`; no API key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import trio

from journal import open_journal
from loopruntime import Limits, LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.toolsets import McpServer
from session import Session

SERVER = Path(__file__).resolve().parent / "servers" / "weather_server.py"


class Trip(msgspec.Struct):
    city: str
    celsius: int
    pack: list[str]


@tool(permission="allow")
async def packing_list(ctx: ToolContext, *, celsius: int) -> list[str]:
    """What to pack for a temperature in degrees Celsius."""
    return ["coat", "gloves"] if celsius < 10 else ["t-shirt", "sunglasses"]


model = ScriptedModel(
    [
        Reply(
            tool_calls=[
                ToolCall(name="weather__temperature", input={"city": "Oslo"}),
                ToolCall(name="packing_list", input={"celsius": 4}),
            ]
        ),
        # Not a Trip: `celsius` must be an integer; the model is told so.
        Reply(
            tool_calls=[
                ToolCall(name="final_answer", input={"city": "Oslo", "celsius": "4", "pack": []})
            ]
        ),
        Reply(
            tool_calls=[
                ToolCall(
                    name="final_answer",
                    input={"city": "Oslo", "celsius": 4, "pack": ["coat", "gloves"]},
                )
            ]
        ),
    ]
)

definition = LoopDefinition(
    name="trip-planner",
    model=model,
    system="Plan a trip: check the weather, then answer with a Trip.",
    tools=[packing_list],
    toolsets=[
        # Tools of an MCP server are asked about (permission "ask") unless
        # the definition says otherwise; this one only reads.
        McpServer.stdio(sys.executable, [str(SERVER)], name="weather", permission="allow")
    ],
    output=Trip,
    limits=Limits(max_output_retries=2),
)


async def main() -> None:
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition) as session:
            await session.submit("I am going to Oslo. What should I pack?")
            await session.wait_idle()
            trip = await session.result()
            state = await session.snapshot()
    print("tools offered:", ", ".join(t.name for t in model.requests[0].tools))
    print("attempts refused:", state.turn_output_failures)
    print("result:", trip)


if __name__ == "__main__":
    trio.run(main)
