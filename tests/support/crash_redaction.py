"""The redaction crash scenario: a replay-safe tool that redacts its password,
killed while it runs, and the definition both processes use.

The tool keeps its real input in a vault file (the host's secret store) under
its execution id, and ``recover_input`` reads it back: the documented way for a
re-run after a restore to get the input the journal does not hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from journal import open_journal
from journal.content import ToolResult
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from tests.support.processes import ready

__all__ = ["PASSWORD", "definition", "redacted", "runs"]

PASSWORD = "s3cr3t-kill-9-b4dc0ffee"


def runs(workdir: Path) -> list[dict[str, Any]]:
    """Every run of the tool, with the input it ran with."""
    path = workdir / "runs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def definition(workdir: Path) -> LoopDefinition:
    vault = workdir / "vault.json"

    def recover(execution_id: str, redacted: Mapping[str, Any]) -> dict[str, Any] | None:
        if not vault.exists():
            return None
        found: dict[str, Any] | None = json.loads(vault.read_text()).get(execution_id)
        return found

    @tool(permission="allow", replay_safe=True, redact=["password"], recover_input=recover)
    async def login(ctx: ToolContext, *, user: str, password: str) -> str:
        """Log in (idempotent)."""
        kept = json.loads(vault.read_text()) if vault.exists() else {}
        kept[ctx.execution_id] = {"user": user, "password": password}
        vault.write_text(json.dumps(kept))
        first = not runs(workdir)
        with (workdir / "runs.jsonl").open("a") as f:
            f.write(json.dumps({"execution": ctx.execution_id, "password": password}) + "\n")
        if first:
            ready()
            await trio.sleep(3600)
        return f"{user} logged in"

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        if last.role == "user" and any(isinstance(b, ToolResult) for b in last.blocks):
            return Reply(text="done")
        return Reply(
            tool_calls=[ToolCall(name="login", input={"user": "bob", "password": PASSWORD})]
        )

    return LoopDefinition(name="crash-redacted", model=ScriptedModel(script), tools=[login])


async def redacted(url: str, session_id: str, workdir: str) -> None:
    """Killed while the redacting, replay-safe tool runs (the tool says READY)."""
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(Path(workdir)), session_id=session_id) as s:
            await s.submit("log bob in")
            await trio.sleep_forever()
