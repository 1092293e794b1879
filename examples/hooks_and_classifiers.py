"""Hooks, tool middleware and a permission classifier, in one loop.

The scripted model asks to run three shell commands.  A classifier (a rule
set) allows `ls` without asking anyone and denies `rm`; `curl` it leaves to
a person, whom this program plays (it allows the call).  A before_tool hook
runs every command in a sandbox directory (the journal keeps the command as
the model wrote it beside the rewrite), an after_tool hook hides a token in
the output, a before_model hook tells the model the date, and a middleware
retries a flaky command inside one call.  The replay at the end shows each
decision.  No API key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from journal import open_journal
from loopruntime import (
    AddContext,
    AfterTool,
    BeforeModel,
    BeforeTool,
    LoopDefinition,
    PermissionRequest,
    ReplaceResult,
    Review,
    Rewrite,
    ToolContext,
    hook,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import render_transcript

failures_left = {"curl": 1}


async def retry_once(ctx: ToolContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
    """Middleware: a command that fails to connect gets one more try, inside
    the same call (one tool.started, one result)."""
    try:
        return await call_next()
    except ConnectionError:
        return await call_next()


@tool(permission="ask", middleware=[retry_once])
async def shell(ctx: ToolContext, *, command: str) -> str:
    """Run a shell command (pretend)."""
    if "curl" in command and failures_left["curl"]:
        failures_left["curl"] -= 1
        raise ConnectionError("connection reset")
    return f"$ {command}\nok; token=sk-12345"


def rules(request: PermissionRequest) -> Review:
    """Classifier: reading is fine, deleting is not, the rest goes to a person."""
    command = request.input["command"]
    if command.startswith("ls"):
        return Review("allow", "listing files changes nothing")
    if command.startswith("rm"):
        return Review("deny", "this agent never deletes files")
    return Review("ask", "network access needs a person")


@hook("before_tool")
async def sandbox(call: BeforeTool) -> Rewrite:
    return Rewrite({"command": f"cd /sandbox && {call.input['command']}"})


@hook("after_tool")
async def hide_tokens(call: AfterTool) -> ReplaceResult | None:
    text = " ".join(getattr(b, "text", "") for b in call.content)
    if "token=" not in text:
        return None
    return ReplaceResult(text.split("token=")[0] + "token=[hidden]", reason="a secret")


@hook("before_model")
async def date(call: BeforeModel) -> AddContext | None:
    return AddContext("Today is 1 December.") if call.step == 0 else None


model = ScriptedModel(
    [
        Reply(
            tool_calls=[
                ToolCall(name="shell", input={"command": "ls"}),
                ToolCall(name="shell", input={"command": "rm -rf build"}),
                ToolCall(name="shell", input={"command": "curl example.org"}),
            ]
        ),
        Reply(text="Listed the files and fetched the page; deleting is not allowed."),
    ]
)

definition = LoopDefinition(
    name="hooked-shell",
    model=model,
    tools=[shell],
    hooks=[date, sandbox, hide_tokens],
    classifiers=[rules],
)


async def main() -> None:
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as session:
            await session.submit("Tidy up and fetch example.org")
            await session.wait_idle()
            for gate in (await session.snapshot()).open_gates:
                print(f"a person is asked: {gate.prompt} {gate.preview}")
                await session.decide(gate.gate_id, True)
            await session.wait_idle()
            print(render_transcript([r async for r in journal.read(session.id)]))


if __name__ == "__main__":
    trio.run(main)
