"""Traces from the journal: the demo's span tree, live and from the journal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from journal import Record, open_journal
from journal.events import ToolStarted
from loopruntime import Delegate, LoopDefinition, ToolContext, tool
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.cli.demo import demo_definition
from session.traces.command import trace_command
from session.traces.otel import Exporter, otlp_json, provider_of, spans_of, trace_id_of
from tests.otel.otlp_receiver import open_receiver


def provider_and_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def span_tree(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> list[str]:
    """Each span as an indented line: name, then the attributes a reader checks."""
    shown = {
        "gen_ai.request.model": "model",
        "gen_ai.usage.input_tokens": "in",
        "gen_ai.usage.output_tokens": "out",
        "gen_ai.response.finish_reasons": "finish",
        "gen_ai.tool.name": "tool",
        "loopruntime.outcome": "outcome",
        "loopruntime.disposition": "disposition",
        "loopruntime.resolved_by": "resolved_by",
    }
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        by_parent.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: (s.start_time, s.name)):
            attrs = span.attributes or {}
            extra = " ".join(
                f"{label}={_value(attrs[k])}" for k, label in shown.items() if k in attrs
            )
            events = ",".join(e.name.removeprefix("loopruntime.") for e in span.events)
            lines.append(
                "  " * depth
                + span.name
                + (f" {extra}" if extra else "")
                + (f" [{events}]" if events else "")
                + (f" ERROR({span.status.description})" if not span.status.is_ok else "")
            )
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


def _value(value: object) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


async def run_demo_session(
    tmp_path: Path, exporter: Exporter | None, *, url: str = "memory:"
) -> tuple[str, list[Record]]:
    async with open_journal(url) as journal:
        async with trio.open_nursery() as nursery:
            async with Session.create(journal, demo_definition(tmp_path)) as s:
                if exporter is not None:
                    nursery.start_soon(exporter.follow, s, 0)
                await s.submit("What's the weather in Paris and Oslo?")
                await s.wait_idle()
                await s.submit("Book a table for two.")
                await s.wait_idle()
                [gate] = (await s.snapshot()).open_gates
                await s.decide(gate.gate_id, allow=True)
                await s.wait_idle()
                await s.submit("Please send the invoice to ACME.")
                await s.wait_idle()
        return s.id, [r async for r in journal.read(s.id)]


GOLDEN = [
    "invoke_agent demo outcome=completed",
    "  chat scripted:demo model=scripted:demo in=27 out=8 finish=tool_use",
    "  execute_tool forecast tool=forecast disposition=succeeded",
    "  execute_tool forecast tool=forecast disposition=succeeded",
    "  chat scripted:demo model=scripted:demo in=67 out=13 finish=end_turn",
    "invoke_agent demo outcome=completed [gate.opened,gate.resolved]",
    "  chat scripted:demo model=scripted:demo in=107 out=9 finish=tool_use",
    "  execute_tool book_table tool=book_table disposition=succeeded",
    "  chat scripted:demo model=scripted:demo in=147 out=9 finish=end_turn",
    "invoke_agent demo outcome=completed",
    "  chat scripted:demo model=scripted:demo in=187 out=6 finish=tool_use",
    "  execute_tool send_invoice tool=send_invoice disposition=succeeded",
    "  chat scripted:demo model=scripted:demo in=227 out=9 finish=end_turn",
]  # fmt: skip
"""The demo's trace: a turn per request, its model calls and tool calls
under it, the permission gate as events of the turn that waited on it."""


async def test_the_demo_gives_the_golden_span_tree(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    provider, memory = provider_and_memory()
    session_id, records = await run_demo_session(tmp_path, Exporter(provider))
    live = memory.get_finished_spans()
    assert span_tree(live) == GOLDEN
    assert {s.context.trace_id for s in live} == {trace_id_of(session_id)}
    # The same trace, span for span, from the journal afterwards.
    later = spans_of(session_id, records)
    assert [(s.context.span_id, s.name, s.parent and s.parent.span_id) for s in later] == [
        (s.context.span_id, s.name, s.parent and s.parent.span_id) for s in live
    ]


async def test_content_is_left_out_unless_asked_for(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    session_id, records = await run_demo_session(tmp_path, None)
    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.result"}
    plain = spans_of(session_id, records)
    assert not any(content_keys & set(s.attributes or {}) for s in plain)
    rich = spans_of(session_id, records, capture_content=True)
    [first] = [s for s in rich if s.name == "invoke_agent demo"][:1]
    assert "weather in Paris" in str((first.attributes or {})["gen_ai.input.messages"])
    results = [str((s.attributes or {}).get("gen_ai.tool.call.result")) for s in rich]
    assert any("14°C, light rain" in r for r in results)
    # The ids do not depend on what is captured.
    assert [s.context.span_id for s in rich] == [s.context.span_id for s in plain]


async def test_replay_exports_the_trace_to_an_otlp_receiver(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    url = "sqlite:///" + str(tmp_path / "journal.db")
    session_id, records = await run_demo_session(tmp_path, None, url=url)
    lines: list[str] = []
    async with open_receiver() as receiver:
        code = await trace_command(
            url, session_id, otlp=receiver.url, out=lines.append, err=lines.append
        )
    assert code == 0, lines
    assert lines == [f"exported 13 spans of session {session_id} to {receiver.url}"]
    assert receiver.content_types == ["application/x-protobuf"]
    got = [
        span
        for request in receiver.requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    expected = spans_of(session_id, records)
    assert sorted((s.span_id, s.name) for s in got) == sorted(
        (s.context.span_id.to_bytes(8, "big"), s.name) for s in expected
    )
    assert {s.trace_id for s in got} == {trace_id_of(session_id).to_bytes(16, "big")}
    tools = [s for s in got if s.name == "execute_tool book_table"]
    assert [
        {a.key: a.value.string_value for a in s.attributes if a.key.startswith("gen_ai.tool")}
        for s in tools
    ] == [
        {
            "gen_ai.tool.name": "book_table",
            "gen_ai.tool.call.id": next(
                r.event.tool_use_id
                for r in records
                if isinstance(r.event, ToolStarted) and r.event.name == "book_table"
            ),
        }
    ]
    # --format otel-json prints the same trace as OTLP/JSON.
    printed: list[str] = []
    assert await trace_command(url, session_id, out=printed.append) == 0
    data = json.loads(printed[0])
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert {s["traceId"] for s in spans} == {f"{trace_id_of(session_id):032x}"}
    assert sorted(s["spanId"] for s in spans) == sorted(
        f"{s.context.span_id:016x}" for s in expected
    )


async def test_an_unreachable_endpoint_is_a_clear_failure(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    url = "sqlite:///" + str(tmp_path / "journal.db")
    session_id, _ = await run_demo_session(tmp_path, None, url=url)
    # A port nobody listens on: bound, then closed.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await listeners[0].aclose()
    lines: list[str] = []
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    code = await trace_command(url, session_id, otlp=endpoint, out=lines.append, err=lines.append)
    assert code == 1
    assert lines[-1].startswith(f"loopruntime replay: the trace was not exported to {endpoint}")


async def test_a_child_loop_nests_under_the_tool_call_that_started_it() -> None:
    researcher = LoopDefinition(name="researcher", model=ScriptedModel([Reply(text="X=42")]))
    lead = LoopDefinition(
        name="lead",
        model=ScriptedModel(
            [
                Reply(tool_calls=[ToolCall(name="research", input={"task": "find X"})]),
                Reply(text="X is 42"),
            ]
        ),
        delegates=[Delegate(name="research", description="Research", definition=researcher)],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("what is X?")
            await s.wait_idle()
        records = [r async for r in journal.read(s.id)]
    lines = [re.sub(r" in=\d+ out=\d+", "", line) for line in span_tree(spans_of(s.id, records))]
    assert lines == [
        "invoke_agent lead outcome=completed [child.finished]",
        "  chat scripted model=scripted finish=tool_use",
        "  execute_tool research tool=research disposition=succeeded",
        "    invoke_agent researcher outcome=completed",
        "      chat scripted model=scripted finish=end_turn",
        "  chat scripted model=scripted finish=end_turn",
    ]


async def test_spans_carry_what_the_conventions_require(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``chat`` names its provider; a span in error names its ``error.type``;
    the service is ``loopruntime`` unless the environment or the caller
    names another."""

    @tool(permission="allow")
    async def explode(ctx: ToolContext) -> str:
        """Fails."""
        raise RuntimeError("boom")

    definition = LoopDefinition(
        name="failing",
        model=ScriptedModel(
            [Reply(tool_calls=[ToolCall(name="explode", input={})]), Reply(text="it failed")],
            name="scripted:failing",
        ),
        tools=[explode],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("try it")
            await s.wait_idle()
        records = [r async for r in journal.read(s.id)]
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    spans = spans_of(s.id, records)
    chats = [sp for sp in spans if sp.name.startswith("chat ")]
    assert chats and all(
        (sp.attributes or {})["gen_ai.provider.name"] == "scripted" for sp in chats
    )
    [failed] = [sp for sp in spans if not sp.status.is_ok]
    assert failed.name == "execute_tool explode"
    assert (failed.attributes or {})["error.type"] == "failed"
    assert {sp.resource.attributes["service.name"] for sp in spans} == {"loopruntime"}
    assert '"stringValue": "loopruntime"' in otlp_json(spans)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-agents")
    assert spans_of(s.id, records)[0].resource.attributes["service.name"] == "billing-agents"
    named = spans_of(s.id, records, service_name="support")
    assert named[0].resource.attributes["service.name"] == "support"


def test_the_provider_is_the_model_names_prefix() -> None:
    assert provider_of("anthropic:claude-sonnet-4-5") == "anthropic"
    assert provider_of("scripted") == "scripted"
    assert provider_of("") == "_OTHER"


async def test_a_pause_and_its_resume_are_events_of_the_turn_they_held(
    autojump_clock: trio.abc.Clock,
) -> None:
    entered, release = trio.Event(), trio.Event()

    @tool(permission="allow")
    async def slow(ctx: ToolContext) -> str:
        """Takes its time."""
        entered.set()
        await release.wait()
        return "done"

    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="slow")]), Reply(text="after")])
    async with open_journal("memory:") as journal:
        async with Session.create(
            journal, LoopDefinition(name="d", model=model, tools=[slow])
        ) as s:
            await s.submit("go")
            await entered.wait()
            await s.pause(principal="ops")
            release.set()
            await s.wait_idle()
            await s.resume()
            await s.wait_idle()
        records = [r async for r in journal.read(s.id)]
    [turn] = [span for span in spans_of(s.id, records) if span.name == "invoke_agent d"]
    events = {e.name: dict(e.attributes or {}) for e in turn.events}
    assert events["loopruntime.loop.paused"] == {"loopruntime.principal": "ops"}
    assert events["loopruntime.loop.resumed"] == {}
