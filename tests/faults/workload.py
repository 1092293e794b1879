"""What the fault run's hosts run: ``loopruntime host --definitions
tests.faults.workload:definitions``.

Every input (its text names the session and the key it was sent under)
makes one turn: the model calls ``effect`` once, then answers.  ``effect``
waits ``EFFECT_DELAY`` (``SLOW_DELAY`` for a key ending in ``slow``: a call
in flight to pause or kill a host in), then
appends one line to the effects log, a file of its own beside the journal,
written with fsync: the truth about what tools did, independent of what the
journal says.  The log's path and the host's id come from the environment
the harness gives each host process.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import msgspec
import trio

from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall

__all__ = ["EFFECTS_ENV", "HOST_ENV", "Effect", "definitions", "effects"]

EFFECTS_ENV = "LOOPRUNTIME_FAULTS_EFFECTS"
HOST_ENV = "LOOPRUNTIME_FAULTS_HOST"

EFFECT_DELAY = 0.2
"""Seconds a call waits before its effect (real time: it runs in a host process)."""

SLOW_DELAY = 2.0
"""The wait of a call whose input's key ends in ``slow``: long enough for the
harness to find it in flight and fault its host there."""


class Effect(msgspec.Struct, frozen=True):
    """One line of the effects log: a tool's effect, done."""

    text: str
    """The input that caused it: ``SESSION/KEY``."""
    tool_use_id: str
    execution_id: str
    host: str
    at: int
    """unix ns, just before the line was written."""


def _record(effect: Effect) -> None:
    path = os.environ[EFFECTS_ENV]
    line = msgspec.json.encode(effect) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)  # one write of one line: O_APPEND keeps lines whole
        os.fsync(fd)
    finally:
        os.close(fd)


def effects(path: Path) -> list[Effect]:
    """Every effect the log holds, in the order written."""
    if not path.exists():
        return []
    return [msgspec.json.decode(line, type=Effect) for line in path.read_bytes().splitlines()]


def definitions() -> dict[str, LoopDefinition]:
    @tool(permission="allow", replay_safe=True)
    async def effect(ctx: ToolContext, *, text: str) -> str:
        """Do the input's effect (safe to run again: its effect is keyed)."""
        await trio.sleep(SLOW_DELAY if text.endswith("slow") else EFFECT_DELAY)
        host = os.environ.get(HOST_ENV, "?")
        _record(Effect(text, ctx.tool_use_id, ctx.execution_id, host, time.time_ns()))
        return json.dumps({"done": text})

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(getattr(b, "tool_use_id", None) for b in last.blocks):
            return Reply(text="done")
        text = "".join(getattr(b, "text", "") for b in last.blocks)
        return Reply(tool_calls=[ToolCall(name="effect", input={"text": text})])

    return {"worker": LoopDefinition(name="worker", model=ScriptedModel(script), tools=[effect])}
