"""A redacted tool call's secret never reaches the console: the page is made
of journal records, and the journal holds only the redacted input and
result (docs/tools.md, "Redaction")."""

from __future__ import annotations

import json

from journal.events import TurnEnded
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Host
from tests.console.support import TOKEN, SseReader, running, wait_for

SECRET = "hunter2-correct-horse"
TOKEN_BACK = "tok-battery-staple"


@tool(permission="allow", redact=["password"], redact_result=["token"])
async def login(ctx: ToolContext, *, user: str, password: str) -> dict[str, str]:
    """Log in to the billing system."""
    assert password == SECRET  # the tool itself sees the real input
    return {"user": user, "token": TOKEN_BACK}


def secret_definition() -> LoopDefinition:
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="login", input={"user": "ann", "password": SECRET})]),
            Reply(text="Logged in."),
        ]
    )
    return LoopDefinition(name="secret", model=model, tools=[login])


async def test_a_redacted_call_shows_no_secret_in_the_console() -> None:
    async with running(host=False) as env:
        async with Host.open(env.journal, {"secret": secret_definition()}, poll=0.05):
            sid = await env.inbox.create("secret", key="c")
            await env.inbox.submit(sid, "log me in", key="m")
            await env.inbox.wait(sid, "m")

            async def ended() -> bool:
                return any([isinstance(r.event, TurnEnded) async for r in env.journal.read(sid)])

            await wait_for(ended)
            async with SseReader(
                env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
            ) as sse:
                items = await sse.until(
                    "items", lambda d: any(i["tag"] == "tool.completed" for i in d)
                )
            shown = json.dumps(items)
            assert "login" in shown and "[redacted]" in shown
            assert SECRET not in shown and TOKEN_BACK not in shown
            # Every record's JSON, as the page opens it on a click, holds neither.
            head = await env.journal.head(sid)
            for seq in range(1, head + 1):
                page = await env.get(f"/api/sessions/{sid}/records/{seq}")
                assert page.status_code == 200, page.text
                assert SECRET not in page.text and TOKEN_BACK not in page.text
