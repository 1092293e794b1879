"""The loops the web service's host runs.

``loopruntime host --definitions examples.web_service.agents:DEFINITIONS``.

Scripted models, so the example runs with no API key: ``echo`` answers each
message at once; ``confirm`` asks a person a question through a gate
(``POST /gates/{id}`` with an ``answer``); ``operator`` restarts a service only
once a person allows it (a permission gate: ``POST /gates/{id}`` with ``allow``).
For a real model, give a definition ``AnthropicModel(model="claude-...")`` (from
``loopruntime.models``) instead.
"""

from __future__ import annotations

from journal.content import Text, ToolResult
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall

__all__ = ["DEFINITIONS"]


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return " ".join(b.text for b in message.blocks if isinstance(b, Text))
    return ""


def _echo(request: ModelRequest) -> Reply:
    return Reply(text=f"You said: {_last_user_text(request)}")


@tool(permission="allow", resumable=True)
async def confirm(ctx: ToolContext, *, what: str) -> str:
    """Ask the person to confirm ``what``; returns their answer."""
    return await ctx.ask_user(f"Shall I {what}?")


def _confirming(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if last.role == "user" and results:
        said = " ".join(c.text for c in results[0].content if isinstance(c, Text))
        return Reply(text=f"Done. The person said: {said}")
    return Reply(tool_calls=[ToolCall(name="confirm", input={"what": _last_user_text(request)})])


@tool(permission="ask")
async def restart(ctx: ToolContext, *, service: str) -> str:
    """Restart ``service`` (a person allows each call first)."""
    return f"{service} restarted"


def _operating(request: ModelRequest) -> Reply:
    last = request.messages[-1]
    results = [b for b in last.blocks if isinstance(b, ToolResult)]
    if last.role == "user" and results:
        said = " ".join(c.text for c in results[0].content if isinstance(c, Text))
        return Reply(text=f"Result: {said}")
    return Reply(tool_calls=[ToolCall(name="restart", input={"service": _last_user_text(request)})])


DEFINITIONS = [
    LoopDefinition(name="echo", model=ScriptedModel(_echo), system="Repeat the message."),
    LoopDefinition(
        name="confirm",
        model=ScriptedModel(_confirming),
        system="Confirm with the person before answering.",
        tools=[confirm],
    ),
    LoopDefinition(
        name="operator",
        model=ScriptedModel(_operating),
        system="Restart the service the person names, once they allow it.",
        tools=[restart],
    ),
]
