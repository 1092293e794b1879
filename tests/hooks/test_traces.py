"""Hook decisions and classifier reviews as span events: names always,
reasons only when content is captured."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from journal import open_journal
from loopruntime import (
    BeforeTool,
    Deny,
    LoopDefinition,
    PermissionRequest,
    Review,
    ToolContext,
    hook,
    tool,
)
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.traces.otel import spans_of
from tests.support.loops import records


async def test_hook_decisions_and_reviews_are_span_events_of_the_turn() -> None:
    @tool(permission="ask")
    async def deploy(ctx: ToolContext, *, target: str) -> str:
        """Deploy."""
        return "deployed"

    def rules(request: PermissionRequest) -> Review:
        return Review("allow", "staging is routine")

    @hook("before_tool")
    async def freeze(call: BeforeTool) -> Deny:
        return Deny("the secret freeze reason")

    model = ScriptedModel(
        [Reply(tool_calls=[ToolCall(name="deploy", input={"target": "staging"})]), Reply(text="ok")]
    )
    d = LoopDefinition(
        name="traced", model=model, tools=[deploy], hooks=[freeze], classifiers=[rules]
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, d) as s:
            await s.submit("deploy")
            await s.wait_idle()
        every = await records(journal, s.id)
    plain = spans_of(s.id, every)
    rich = spans_of(s.id, every, capture_content=True)

    def events(spans: tuple[ReadableSpan, ...]) -> dict[str, dict[str, Any]]:
        [turn] = [span for span in spans if span.name.startswith("invoke_agent")]
        return {e.name: dict(e.attributes or {}) for e in turn.events}

    found = events(plain)
    assert found["loopruntime.gate.reviewed"]["loopruntime.classifier"] == "rules"
    assert found["loopruntime.gate.reviewed"]["loopruntime.verdict"] == "allow"
    assert found["loopruntime.hook.decided"]["loopruntime.hook"] == "freeze"
    assert found["loopruntime.hook.decided"]["loopruntime.hook.action"] == "deny"
    assert "loopruntime.reason" not in found["loopruntime.hook.decided"]
    assert events(rich)["loopruntime.hook.decided"]["loopruntime.reason"] == (
        "the secret freeze reason"
    )
