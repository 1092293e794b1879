"""The trace and the unified model agree about structure: a turn span per run,
a chat span per ``llm.call`` and an execute_tool span per tool use, each under
its run's turn span; where the trace puts a child's turns under its parent's
execute_tool span (OpenTelemetry's parenting), the model has a ``starts``
relation from that call, never containment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from journal import Record
from journal.memory import MemoryJournal
from session.traces.otel import SpanBuilder, span_id_of
from tests.fork.test_fork import run_scenario
from tests.replay.test_unified import ancestors, kinds, rels
from tests.replay.test_unified_runtime import delegation, document


def loop_of(doc: dict[str, Any], node_id: str) -> str:
    streams = {n["id"]: n for n in kinds(doc, "stream")}
    [stream] = [streams[a] for a in ancestors(doc, node_id) if a in streams]
    return str(stream["attrs"]["loop"])


def assert_agree(session_id: str, recs: list[Record]) -> int:
    """Checks the agreement; returns how many runs the trace nests under a tool."""
    doc = document(session_id, recs)
    spans = {s.span_id: s for s in SpanBuilder(session_id).feed_all(recs)}
    nodes = {n["id"]: n for n in doc["nodes"]}

    def turn_span(run_id: str) -> int:
        run = nodes[run_id]
        return span_id_of(session_id, "turn", loop_of(doc, run_id), str(run["attrs"]["turn"]))

    for run in kinds(doc, "run"):
        if run["attrs"]["outcome"] is not None:
            assert turn_span(run["id"]) in spans, run["id"]
    for call in kinds(doc, "llm.call"):
        span = spans[
            span_id_of(session_id, "call", loop_of(doc, call["id"]), call["attrs"]["effect_id"])
        ]
        assert span.parent_id == turn_span(call["parent"])
    for tool in kinds(doc, "tool") + kinds(doc, "agent.call"):
        execution = tool["attrs"]["execution_id"]
        if execution:
            span = spans[span_id_of(session_id, "tool", loop_of(doc, tool["id"]), execution)]
            assert span.parent_id == turn_span(tool["parent"])
    starts = rels(doc, "starts")
    nested = 0
    for run in kinds(doc, "run"):
        if run["attrs"]["outcome"] is None:
            continue
        parent = spans[turn_span(run["id"])].parent_id
        if parent is None:
            continue
        # The trace nests the child's turn under a tool span: the model relates
        # that tool to the child's stream instead.
        [tool] = [
            t
            for t in kinds(doc, "agent.call")
            if span_id_of(session_id, "tool", loop_of(doc, t["id"]), t["attrs"]["execution_id"])
            == parent
        ]
        stream = next(a for a in ancestors(doc, run["id"]) if a.startswith("stream:"))
        assert (tool["id"], stream, "exact_unique") in starts
        assert tool["id"] not in ancestors(doc, run["id"])
        nested += 1
    return nested


async def test_a_delegation_agrees(autojump_clock: trio.abc.Clock) -> None:
    for background in (False, True):
        session_id, recs = await delegation(background=background)
        assert assert_agree(session_id, recs) == 1


async def test_the_crash_scenario_agrees(tmp_path: Path) -> None:
    recs = await run_scenario(MemoryJournal(), tmp_path)
    assert assert_agree(recs[0].session, recs) == 0
