"""The three views of a session's structure agree with the unified model.

``--format tree``, the console's tree (its data endpoint) and the
OpenTelemetry spans all place every stream, epoch, talk, run and step where
the model's containment does, and relate a child's stream to the call that
``starts`` it as the model does: the tree by that relation, the trace by
parenting the child's turn spans to that call's ``execute_tool`` span (the one
place a span's parent is not containment: docs/traces.md, "Structure").
Scenarios: children in the foreground and the background (run and
hand-written), collaboration, compaction (between turns and inside one), an
interrupt, a failed child and its retry, two calls naming one child, forks."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import Draft, Record
from journal.content import Message, Text, ToolUse
from journal.events import (
    ChildFinished,
    CollabStarted,
    CompactionCommitted,
    CompactionStarted,
    Event,
    GateOpened,
    GateResolved,
    InputCancelled,
    InputQueued,
    ModelCallStarted,
    ModelMessageCommitted,
    SteerQueued,
    ToolAbandoned,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from journal.memory import MemoryJournal
from session import Session
from session.replay import build_tree, build_unified, tree_json, unified_json
from session.traces.otel import FinishedSpan, SpanBuilder, span_id_of
from tests.console.support import running
from tests.fork.test_fork import records as read_records
from tests.fork.test_fork import run_scenario
from tests.replay.bad import SESSION, good_turn, user
from tests.replay.test_unified import (
    assert_well_formed,
    background,
    child_result,
    child_run,
    delegating,
    foreground,
    session_of,
    started,
    tool_done,
)
from tests.replay.test_unified_runtime import as_old, delegation
from tests.support import crash_points as scenario

Doc = dict[str, Any]


class Model:
    """The unified document, indexed by what the views ask of it."""

    def __init__(self, session_id: str, records: list[Record]) -> None:
        self.session = session_id
        self.doc: Doc = json.loads(unified_json(build_unified(session_id, records)))
        assert_well_formed(self.doc)
        self.nodes: dict[str, Doc] = {n["id"]: n for n in self.doc["nodes"]}

    def of_kind(self, *kinds: str) -> list[Doc]:
        return [n for n in self.doc["nodes"] if n["kind"] in kinds]

    def relations(self, type: str) -> set[tuple[str, str]]:
        return {(r["from"], r["to"]) for r in self.doc["relations"] if r["type"] == type}

    def loop_of(self, node_id: str) -> str:
        up: str | None = node_id
        while up is not None and self.nodes[up]["kind"] != "stream":
            up = self.nodes[up]["parent"]
        assert up is not None, node_id
        return str(self.nodes[up]["attrs"]["loop"])

    def turn_span(self, run_id: str) -> int:
        turn = str(self.nodes[run_id]["attrs"]["turn"])
        return span_id_of(self.session, "turn", self.loop_of(run_id), turn)

    def stream_root(self, loop: str) -> int | None:
        """Where a stream's runs hang in the trace: the execute_tool span of
        the one call that ``starts`` the stream; none when no call or several
        do (an ambiguous join is never resolved by choosing one)."""
        callers = [f for f, t in self.relations("starts") if t == f"stream:{loop}"]
        if len(callers) != 1:
            return None
        call = self.nodes[callers[0]]
        return span_id_of(
            self.session, "tool", self.loop_of(call["id"]), call["attrs"]["execution_id"]
        )


def assert_tree_agrees(model: Model, tree: Doc) -> None:
    """The tree's containment is the model's, and so are its ``starts``."""
    parent_of = {n["id"]: n["parent"] for n in model.doc["nodes"]}
    shown: set[str] = set()
    for stream in tree["streams"]:
        loop = stream["loop"]
        assert parent_of[stream["id"]] == f"session:{model.session}"
        shown.add(stream["id"])
        for epoch in stream["epochs"]:
            assert parent_of[epoch["id"]] == stream["id"]
            shown.add(epoch["id"])
            for talk in epoch["talks"]:
                assert parent_of[talk["id"]] == epoch["id"]
                shown.add(talk["id"])
                for run in talk["runs"]:
                    assert parent_of[run["id"]] == talk["id"]
                    shown.add(run["id"])
                    for step in run["steps"]:
                        node = step["id"]
                        if step["kind"] == "model":
                            node = f"call:{loop}:{step['effect_id']}"
                        assert parent_of[node] == run["id"], node
                        shown.add(node)
                        for gate in step.get("gates", []):
                            assert parent_of[gate["id"]] == run["id"]
        for node in stream["inputs"]:
            if node["run"] is not None:
                assert parent_of[node["id"]] == node["run"]
            else:
                assert parent_of[parent_of[node["id"]]] == stream["id"]  # its epoch
    # Every structural node and step of the model the tree could show, it shows.
    for node in model.of_kind("stream", "epoch", "talk", "run", "llm.call", "tool", "agent.call"):
        if node["claim"] != "unavailable":
            assert node["id"] in shown, node["id"]
    tree_starts = {
        (r["source"], r["target"])
        for r in tree["relations"]
        if r["kind"] == "starts" and r["target"].startswith("stream:")
    }
    assert tree_starts == model.relations("starts")
    tree_reports = {(r["source"], r["target"]) for r in tree["relations"] if r["kind"] == "reports"}
    from_inputs = {(f, t) for f, t in model.relations("reports") if f.startswith("input:")}
    assert tree_reports == from_inputs


def expected_parent(model: Model, span: FinishedSpan) -> int | None:
    """The span's parent as the model says: a step's is its run's turn span; a
    run's is its stream's root."""
    what, loop, key = span.shows
    if what == "turn":
        runs = [
            n
            for n in model.of_kind("run")
            if model.loop_of(n["id"]) == loop and str(n["attrs"]["turn"]) == key
        ]
        assert runs, span.name  # every turn span shows a run of the model
        return model.stream_root(loop)
    if what == "call":
        node = model.nodes[f"call:{loop}:{key}"]
    else:
        # A stand-in for a use the journal does not show (claim unavailable)
        # is no span: the trace draws what was observed.
        [node] = [
            n
            for n in model.of_kind("tool", "agent.call")
            if n["attrs"]["tool_use_id"] == key
            and model.loop_of(n["id"]) == loop
            and n["claim"] != "unavailable"
        ]
    return model.turn_span(node["parent"])


def assert_trace_agrees(model: Model, spans: list[FinishedSpan]) -> int:
    """Every span shows a node of the model and hangs where the model says;
    returns how many turn spans hang under the call that starts their stream."""
    by_id = {s.span_id: s for s in spans}
    started = 0
    for span in spans:
        assert span.parent_id == expected_parent(model, span), span.name
        if span.shows[0] == "turn" and span.parent_id is not None:
            started += 1
    # Every finished run and call of the model has its span.
    for run in model.of_kind("run"):
        if run["attrs"]["outcome"] is not None:
            assert model.turn_span(run["id"]) in by_id, run["id"]
    for call in model.of_kind("llm.call"):
        if call["content"] == "available":
            loop = model.loop_of(call["id"])
            assert span_id_of(model.session, "call", loop, call["attrs"]["effect_id"]) in by_id
    return started


async def console_tree(session_id: str, records: list[Record]) -> Doc:
    """What the console's data endpoint serves for these records."""
    journal = MemoryJournal()
    lease = await journal.open_session(session_id)
    for seq, r in enumerate(records):
        draft = Draft(id=r.id, loop=r.loop, event=r.event, cause=r.cause)
        await journal.append(lease, [draft], expected_seq=seq)
    async with running(journal=journal, host=False) as env:
        response = await env.get(f"/api/sessions/{session_id}/tree")
    assert response.status_code == 200
    served: Doc = response.json()
    return served


async def assert_views_agree(session_id: str, records: list[Record]) -> int:
    """Tree, console and trace against the model; returns how many turn
    spans the trace hangs under a starting call."""
    model = Model(session_id, records)
    tree: Doc = json.loads(tree_json(build_tree(session_id, records)))
    assert_tree_agrees(model, tree)
    served = await console_tree(session_id, records)
    assert_tree_agrees(model, served)
    assert served["streams"] == tree["streams"] and served["relations"] == tree["relations"]
    return assert_trace_agrees(model, SpanBuilder(session_id).feed_all(records))


# -- scenarios ---------------------------------------------------------------------


def compaction_inside_a_turn() -> list[tuple[str, list[Event]]]:
    """A compaction committed while the turn waits at a gate: the run is cut
    in two parts, and the call asked in the first runs in the second."""
    events = good_turn()
    gate = GateOpened(
        gate_id="g1", kind="permission", execution_id="", tool_use_id="tu1", tool_name="add"
    )
    cut = CompactionCommitted(
        attempt_id="c1",
        basis=6,
        summary=Message(role="user", blocks=(Text(text="adding"),), derived=True),
        replaced=2,
        retained=1,
    )
    events[5:5] = [
        gate,
        CompactionStarted(attempt_id="c1", basis=6),
        cut,
        GateResolved(gate_id="g1", kind="permission", allow=True),
    ]
    return [("main", events)]


def interrupt() -> list[tuple[str, list[Event]]]:
    events: list[Event] = [
        *good_turn()[:6],
        SteerQueued(steer_id="s1", text="in euros"),
        InputQueued(input_id="in3", messages=(user("then this"),)),
        ToolAbandoned(execution_id="x1", tool_use_id="tu1", reason="interrupted"),
        TurnEnded(turn=1, outcome="interrupted"),
        InputCancelled(input_id="in3", reason="turn_interrupted"),
    ]
    return [("main", events)]


def failed_child_and_retry() -> list[tuple[str, list[Event]]]:
    return [
        ("main", [*delegating("x1", "tu1"), started("kid1")]),
        ("kid1", child_run("kid1", outcome="failed")),
        ("main", [ChildFinished(child_loop="kid1", status="failed", output="no table")]),
        ("main", [started("kid2")]),
        ("kid2", child_run("kid2")),
        ("main", [*child_result("kid2", exact=True), tool_done("x1", "tu1", "Chez Nous")]),
        ("main", [TurnEnded(turn=1, outcome="completed")]),
    ]


def two_calls_name_one_child() -> list[tuple[str, list[Event]]]:
    second = ModelMessageCommitted(
        effect_id="e9",
        turn=1,
        step=1,
        message=Message(role="assistant", blocks=(ToolUse(id="tu2", name="delegate", input={}),)),
    )
    return [
        ("main", [*delegating("x1", "tu1"), started("kid"), tool_done("x1", "tu1")]),
        (
            "main",
            [
                ModelCallStarted(effect_id="e9", turn=1, step=1, model="m"),
                second,
                ToolStarted(execution_id="x2", tool_use_id="tu2", name="delegate", input={}),
                started("kid", execution="x2"),
            ],
        ),
        ("kid", child_run("kid")),
        ("main", child_result("kid", exact=True)),
    ]


def collaboration() -> list[tuple[str, list[Event]]]:
    collab = CollabStarted(
        collab_id="c1",
        coordinator="lead",
        workers=("w1",),
        input="plan",
        max_turns=4,
        max_tasks=4,
        max_concurrent_tasks=1,
        max_controls_per_turn=1,
    )
    return [("main", good_turn()), ("collab:c1", [collab])]


HAND_WRITTEN: dict[str, tuple[Callable[[], Any], int]] = {
    "compaction inside a turn": (compaction_inside_a_turn, 0),
    "interrupt": (interrupt, 0),
    "failed child and its retry": (failed_child_and_retry, 2),
    "two calls name one child": (two_calls_name_one_child, 0),
    "collaboration": (collaboration, 0),
}
"""Scenario -> (its parts, how many turn spans hang under a starting call)."""


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
async def test_hand_written_journals_agree(name: str) -> None:
    parts, nested = HAND_WRITTEN[name]
    records = await session_of(*parts())
    assert await assert_views_agree(SESSION, records) == nested


BUILT: dict[str, tuple[Callable[[], Awaitable[list[Record]]], int]] = {
    "foreground": (foreground, 1),
    "foreground, old journal": (lambda: foreground(exact=False), 1),
    "background": (background, 1),
}


@pytest.mark.parametrize("name", sorted(BUILT))
async def test_children_agree(name: str) -> None:
    build, nested = BUILT[name]
    records = await build()
    assert await assert_views_agree(SESSION, records) == nested
    # A journal from before results named their child: the same structure.
    assert await assert_views_agree(SESSION, as_old(records)) == nested


async def test_a_run_delegation_agrees(autojump_clock: trio.abc.Clock) -> None:
    for is_background in (False, True):
        session_id, records = await delegation(background=is_background)
        # The child's one turn hangs under the call that starts its stream.
        assert await assert_views_agree(session_id, records) == 1


async def test_the_crash_scenario_and_a_fork_cut_inside_a_turn_agree(tmp_path: Path) -> None:
    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    assert await assert_views_agree(scenario.SESSION, source) == 0
    cut = next(r for r in source if isinstance(r.event, ToolStarted))
    ledger = scenario.Ledger(tmp_path, "fork")
    async with Session.fork(
        journal, scenario.SESSION, scenario.definition(ledger), at=cut.seq, new_session_id="f"
    ) as fork:
        await scenario.settle(fork, ledger)
    forked = await read_records(journal, "f")
    assert await assert_views_agree("f", forked) == 0
    # The turn the fork was cut inside is a run of the fork's model too, and
    # the call running at the cut is a step of it.
    model = Model("f", forked)
    assert isinstance(cut.event, ToolStarted)
    [tool] = [
        n for n in model.of_kind("tool") if n["attrs"].get("execution_id") == cut.event.execution_id
    ]
    began = [r.event for r in source[: cut.seq] if r.loop == cut.loop]
    turn = [e.turn for e in began if isinstance(e, TurnStarted)][-1]
    assert model.nodes[tool["parent"]]["attrs"]["turn"] == turn


@pytest.mark.parametrize("name", sorted(BUILT) + sorted(HAND_WRITTEN))
async def test_every_prefix_agrees(name: str) -> None:
    """What a live view has seen is a prefix: open runs, calls in flight and a
    child not yet finished are placed as the model of that prefix places them."""
    if name in BUILT:
        records = await BUILT[name][0]()
    else:
        records = await session_of(*HAND_WRITTEN[name][0]())
    for cut in range(1, len(records) + 1):
        prefix = records[:cut]
        model = Model(SESSION, prefix)
        assert_tree_agrees(model, json.loads(tree_json(build_tree(SESSION, prefix))))
        assert_trace_agrees(model, SpanBuilder(SESSION).feed_all(prefix))
