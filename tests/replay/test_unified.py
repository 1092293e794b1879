"""The unified conversation model: every kind, relation and rule of the seed,
on hand-built journals (children, collaboration, compaction, an interrupt, a
failed child and its retry, a redacted tool, a fork)."""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import Draft, Record
from journal.content import Message, Text, Thinking, ToolUse
from journal.events import (
    CHECKPOINT_STREAM,
    ChildFinished,
    ChildStarted,
    CollabStarted,
    CompactionCommitted,
    CompactionStarted,
    Event,
    GateOpened,
    InputCancelled,
    InputQueued,
    LoopStarted,
    ModelCallFailed,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    Provenance,
    SessionForked,
    SteerApplied,
    SteerQueued,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
    TurnEnded,
    TurnStarted,
)
from journal.memory import MemoryJournal
from session.replay import (
    UNIFIED_SCHEMA,
    UNIFIED_VERSION,
    build_unified,
    unified_json,
    unified_json_schema,
)
from session.replay.unified import (
    STRUCTURAL_KINDS,
    NodeKind,
    counts_as_agent_output,
    owned_by_child_stream,
    starts_talk,
)
from tests.replay.bad import SESSION, assistant, good_turn, user

Doc = dict[str, Any]

made: set[str] = set()
"""Every kind a document built here had (the test of every kind reads it)."""


async def session_of(*parts: tuple[str, list[Event]]) -> list[Record]:
    """One session's records: each part's events on its loop, in order."""
    journal = MemoryJournal()
    lease = await journal.open_session(SESSION)
    seq = 0
    for loop, events in parts:
        for event in events:
            draft = Draft(id=f"r{seq}", loop=loop, event=event)
            await journal.append(lease, [draft], expected_seq=seq)
            seq += 1
    return [r async for r in journal.read(SESSION)]


def document(records: list[Record], **kw: Any) -> Doc:
    doc = json.loads(unified_json(build_unified(SESSION, records, **kw)))
    assert_well_formed(doc)
    made.update(n["kind"] for n in doc["nodes"])
    return doc


def assert_well_formed(doc: Doc) -> None:
    """Every relation's ends exist; every node but the root has one
    containment parent, and the parents reach the root."""
    nodes = {n["id"]: n for n in doc["nodes"]}
    assert len(nodes) == len(doc["nodes"])
    roots = [n for n in doc["nodes"] if n["parent"] is None]
    assert [r["kind"] for r in roots] == ["conversation"]
    for node in doc["nodes"]:
        seen = {node["id"]}
        up = node["parent"]
        while up is not None:
            assert up in nodes and up not in seen, node
            seen.add(up)
            up = nodes[up]["parent"]
    for rel in doc["relations"]:
        assert rel["from"] in nodes and rel["to"] in nodes, rel


def kinds(doc: Doc, kind: str) -> list[Doc]:
    return [n for n in doc["nodes"] if n["kind"] == kind]


def rels(doc: Doc, type: str) -> set[tuple[str, str, str]]:
    return {(r["from"], r["to"], r["quality"]) for r in doc["relations"] if r["type"] == type}


def ancestors(doc: Doc, node_id: str) -> list[str]:
    nodes = {n["id"]: n for n in doc["nodes"]}
    out = []
    up = nodes[node_id]["parent"]
    while up is not None:
        out.append(up)
        up = nodes[up]["parent"]
    return out


def delegating(execution: str, tool_use: str, *, first_turn: bool = True) -> list[Event]:
    """Main asks for a delegate tool call and starts it."""
    turn = 1 if first_turn else 2
    opening: list[Event] = [LoopStarted(definition="d", model="m")] if first_turn else []
    return [
        *opening,
        InputQueued(input_id=f"in{turn}", messages=(user("plan a dinner"),)),
        TurnStarted(turn=turn, input_ids=(f"in{turn}",)),
        ModelCallStarted(effect_id=f"e{turn}", turn=turn, step=0, model="m"),
        ModelMessageCommitted(
            effect_id=f"e{turn}",
            turn=turn,
            step=0,
            message=Message(
                role="assistant",
                blocks=(Text(text="asking"), ToolUse(id=tool_use, name="delegate", input={})),
            ),
            stop_reason="tool_use",
        ),
        ToolStarted(execution_id=execution, tool_use_id=tool_use, name="delegate", input={}),
    ]


def child_run(name: str, *, outcome: str = "completed") -> list[Event]:
    provenance = Provenance(parent_loop="main", turn=1, step=0, execution_id="x1")
    return [
        LoopStarted(definition="helper", model="m", parent=provenance),
        InputQueued(input_id=f"{name}-task", messages=(user("find a place"),)),
        TurnStarted(turn=1, input_ids=(f"{name}-task",)),
        ModelCallStarted(effect_id=f"{name}-e", turn=1, step=0, model="m"),
        ModelMessageCommitted(
            effect_id=f"{name}-e", turn=1, step=0, message=assistant("Chez Nous")
        ),
        TurnEnded(turn=1, outcome=outcome),  # type: ignore[arg-type]
    ]


def child_result(child: str, *, exact: bool, background: bool = False) -> list[Event]:
    """The runtime delivers a child's result: child.finished, then the input
    (naming its child when ``exact``, as new journals do)."""
    return [
        ChildFinished(child_loop=child, status="completed", output="Chez Nous"),
        InputQueued(
            input_id=f"res-{child}",
            messages=(user(f"[result of child loop {child} (completed)]\nChez Nous"),),
            trigger="notification" if background else "subagent",
            child_loop=child if exact else None,
        ),
    ]


def resume(turn: int, input_id: str) -> list[Event]:
    return [
        TurnStarted(turn=turn, input_ids=(input_id,)),
        ModelCallStarted(effect_id=f"r{turn}", turn=turn, step=0, model="m"),
        ModelMessageCommitted(effect_id=f"r{turn}", turn=turn, step=0, message=assistant("booked")),
        TurnEnded(turn=turn, outcome="completed"),
    ]


def started(child: str, *, background: bool = False, execution: str = "x1") -> ChildStarted:
    provenance = Provenance(parent_loop="main", turn=1, step=0, execution_id=execution)
    return ChildStarted(
        child_loop=child, definition="helper", provenance=provenance, background=background
    )


def tool_done(execution: str, tool_use: str, text: str = "started") -> ToolCompleted:
    return ToolCompleted(
        execution_id=execution,
        tool_use_id=tool_use,
        content=(Text(text=text),),
        disposition="succeeded",
    )


async def foreground(*, exact: bool = True) -> list[Record]:
    return await session_of(
        ("main", [*delegating("x1", "tu1"), started("kid")]),
        ("kid", child_run("kid")),
        ("main", [*child_result("kid", exact=exact), tool_done("x1", "tu1", "Chez Nous")]),
        ("main", [TurnEnded(turn=1, outcome="completed"), *resume(2, "res-kid")]),
    )


async def background() -> list[Record]:
    return await session_of(
        ("main", [*delegating("x1", "tu1"), started("bg", background=True)]),
        ("main", [tool_done("x1", "tu1", "started bg"), TurnEnded(turn=1, outcome="completed")]),
        ("bg", child_run("bg")),
        ("main", [*child_result("bg", exact=True, background=True), *resume(2, "res-bg")]),
    )


# -- the document ---------------------------------------------------------------


async def test_the_document_names_itself_and_validates_against_its_schema() -> None:
    records = await foreground()
    doc = document(records)
    assert (doc["schema"], doc["version"]) == (UNIFIED_SCHEMA, UNIFIED_VERSION)
    assert doc["session"] == SESSION and doc["head"] == records[-1].seq
    schema = unified_json_schema()
    assert {"Document", "Node", "Relation"} <= set(schema["$defs"])
    relation = schema["$defs"]["Relation"]["properties"]
    assert set(relation) == {"type", "from", "to", "quality", "via"}


async def test_the_spine_is_conversation_session_stream_epoch_talk_run_step() -> None:
    doc = document(await foreground())
    [step] = [n for n in kinds(doc, "message.external") if n["id"] == "input:main:in1"]
    chain = [n["kind"] for n in doc["nodes"] if n["id"] in ancestors(doc, step["id"])]
    assert set(chain) == {"conversation", "session", "stream", "epoch", "talk", "run"}
    assert [n["kind"] for n in doc["nodes"][:2]] == ["conversation", "session"]


# -- children -------------------------------------------------------------------


async def test_one_tool_use_is_one_step_and_a_delegate_call_is_an_agent_call() -> None:
    records = await foreground()
    doc = document(records)
    [call] = kinds(doc, "agent.call")
    assert call["id"] == "step:main:tu1" and not kinds(doc, "tool")
    requested, began, completed = (
        next(r.seq for r in records if isinstance(r.event, kind))
        for kind in (ModelMessageCommitted, ToolStarted, ToolCompleted)
    )
    assert {requested, began, completed} <= set(call["seqs"])
    assert call["content"] == "available" and call["text"] == "Chez Nous"
    [ack] = kinds(doc, "agent.launch_ack")
    assert ack["attrs"]["background"] is False
    assert (ack["id"], call["id"], "exact_unique") in rels(doc, "result_of")
    assert (call["id"], "stream:kid", "exact_unique") in rels(doc, "starts")


async def test_new_journals_join_a_childs_result_exactly() -> None:
    doc = document(await foreground(exact=True))
    [note] = kinds(doc, "runtime.notification")
    assert (note["id"], "stream:kid", "exact_unique") in rels(doc, "reports")
    assert (note["id"], "step:main:tu1", "exact_unique") in rels(doc, "result_of")
    assert ("stream:kid", "output:kid", "exact_unique") in rels(doc, "ends_with")
    assert (note["id"], "call:main:r2", "exact_unique") in rels(doc, "input_of")


async def test_old_journals_join_a_childs_result_by_its_text() -> None:
    doc = document(await foreground(exact=False))
    [note] = kinds(doc, "runtime.notification")
    assert rels(doc, "reports") == {(note["id"], "stream:kid", "strong_inference")}
    assert (note["id"], "step:main:tu1", "strong_inference") in rels(doc, "result_of")


async def test_agent_output_is_owned_by_the_child_stream() -> None:
    doc = document(await foreground())
    [output] = kinds(doc, "agent.output")
    assert owned_by_child_stream(output["kind"])
    assert "stream:kid" in ancestors(doc, output["id"])
    assert "stream:main" not in ancestors(doc, output["id"])
    assert output["text"] == "Chez Nous"


async def test_cross_stream_flow_is_never_containment() -> None:
    doc = document(await foreground())
    [kid] = [n for n in kinds(doc, "stream") if n["id"] == "stream:kid"]
    assert kid["parent"] == f"session:{SESSION}" and kid["role"] == "child"
    under_kid = [n for n in doc["nodes"] if "stream:kid" in ancestors(doc, n["id"])]
    assert under_kid and all("stream:main" not in ancestors(doc, n["id"]) for n in under_kid)


async def test_only_external_input_starts_a_talk() -> None:
    assert starts_talk("external") and not starts_talk("notification")
    for records in (await foreground(), await background()):
        doc = document(records)
        main_talks = [t for t in kinds(doc, "talk") if t["id"].startswith("talk:main:")]
        # The child's result resumes the parent in the talk that delegated.
        assert [t["trigger"] for t in main_talks] == ["external"]
        runs = [r for r in kinds(doc, "run") if r["parent"] == main_talks[0]["id"]]
        assert [r["attrs"]["turn"] for r in runs] == [1, 2]


async def test_a_background_child_acknowledges_its_launch_and_reports_later() -> None:
    doc = document(await background())
    [ack] = kinds(doc, "agent.launch_ack")
    assert ack["attrs"]["background"] is True
    [note] = kinds(doc, "runtime.notification")
    assert note["attrs"]["trigger"] == "notification"
    assert (note["id"], "stream:bg", "exact_unique") in rels(doc, "reports")


async def test_a_segment_holds_the_talks_a_piece_of_input_woke_across_streams() -> None:
    records = await background()
    doc = document(records)
    [segment] = kinds(doc, "segment")
    assert segment["parent"] == f"conversation:{SESSION}"
    in_segment = rels(doc, "in_segment")
    assert {t for t, _, _ in in_segment} == {t["id"] for t in kinds(doc, "talk")}
    # The parent went idle while the child ran: still one window.
    assert {s for _, s, _ in in_segment} == {segment["id"]}


async def test_quiet_between_two_inputs_makes_two_segments() -> None:
    second: list[Event] = [
        InputQueued(input_id="in2", messages=(user("again"),)),
        TurnStarted(turn=2, input_ids=("in2",)),
        TurnEnded(turn=2, outcome="completed"),
    ]
    doc = document(await session_of(("main", [*good_turn(), *second])))
    assert [s["seqs"] for s in kinds(doc, "segment")] == [[2, 10], [11, 13]]


async def test_an_ambiguous_key_is_never_resolved_by_choosing_one() -> None:
    # Two delegate calls name the same child loop: the result's join stays open.
    records = await session_of(
        ("main", [*delegating("x1", "tu1"), started("kid")]),
        ("main", [tool_done("x1", "tu1")]),
        (
            "main",
            [
                ModelCallStarted(effect_id="e9", turn=1, step=1, model="m"),
                ModelMessageCommitted(
                    effect_id="e9",
                    turn=1,
                    step=1,
                    message=Message(
                        role="assistant", blocks=(ToolUse(id="tu2", name="delegate", input={}),)
                    ),
                ),
                ToolStarted(execution_id="x2", tool_use_id="tu2", name="delegate", input={}),
                started("kid", execution="x2"),
            ],
        ),
        ("kid", child_run("kid")),
        ("main", child_result("kid", exact=True)),
    )
    doc = document(records)
    [note] = kinds(doc, "runtime.notification")
    result_of = {(f, t, q) for f, t, q in rels(doc, "result_of") if f == note["id"]}
    assert result_of == {
        (note["id"], "step:main:tu1", "exact_ambiguous"),
        (note["id"], "step:main:tu2", "exact_ambiguous"),
    }


async def test_a_child_never_seen_is_unavailable_not_made_up() -> None:
    doc = document(await session_of(("main", [*delegating("x1", "tu1"), started("ghost")])))
    [ghost] = [n for n in kinds(doc, "stream") if n["id"] == "stream:ghost"]
    assert ghost["claim"] == "unavailable"
    assert not [n for n in doc["nodes"] if n["parent"] == "stream:ghost"]


async def test_a_failed_child_and_its_retry() -> None:
    records = await session_of(
        ("main", [*delegating("x1", "tu1"), started("kid1")]),
        ("kid1", child_run("kid1", outcome="failed")),
        ("main", [ChildFinished(child_loop="kid1", status="failed", output="no table")]),
        ("main", [started("kid2")]),
        ("kid2", child_run("kid2")),
        ("main", child_result("kid2", exact=True)),
    )
    doc = document(records)
    assert rels(doc, "retries") == {("stream:kid2", "stream:kid1", "weak_inference")}
    [failed] = [n for n in kinds(doc, "agent.output") if n["id"] == "output:kid1"]
    assert failed["attrs"]["status"] == "failed"


# -- synthetic words, errors, notices ----------------------------------------------


async def test_synthetic_messages_and_notices_never_count_as_agent_output() -> None:
    events: list[Event] = [
        *good_turn()[:4],
        ModelCallFailed(effect_id="e1", kind="provider", code="model.overloaded", detail="busy"),
        Notice(code="model.retrying", text="the provider was busy"),
        ModelCallStarted(effect_id="e1b", turn=1, step=0, model="m"),
        ModelMessageCommitted(
            effect_id="e1b",
            turn=1,
            step=0,
            message=Message(
                role="assistant", blocks=(Text(text="[provider unavailable]"),), synthetic=True
            ),
        ),
        TurnEnded(turn=1, outcome="failed"),
    ]
    doc = document(await session_of(("main", events)))
    [error] = kinds(doc, "error.api")
    assert error["attrs"]["code"] == "model.overloaded"
    [synthetic] = kinds(doc, "message.synthetic")
    [notice] = kinds(doc, "control.notice")
    assert not counts_as_agent_output(synthetic["kind"])
    assert not counts_as_agent_output(notice["kind"])
    assert not [n for n in doc["nodes"] if counts_as_agent_output(n["kind"])]
    first, second = kinds(doc, "llm.call")
    assert rels(doc, "retries") == {(second["id"], first["id"], "strong_inference")}


async def test_an_interrupt_cancels_its_run_and_the_tool_it_cut() -> None:
    events: list[Event] = [
        *good_turn()[:6],
        SteerQueued(steer_id="s1", text="in euros"),
        InputQueued(input_id="in3", messages=(user("then this"),)),
        ToolAbandoned(execution_id="x1", tool_use_id="tu1", reason="interrupted"),
        TurnEnded(turn=1, outcome="interrupted"),
        InputCancelled(input_id="in3", reason="turn_interrupted"),
        InputQueued(input_id="in2", messages=(user("skip it"),)),
        InputCancelled(input_id="in2"),
    ]
    doc = document(await session_of(("main", events)))
    [interrupt] = kinds(doc, "control.interrupt")
    assert interrupt["parent"] == "run:main:1"
    cancels = rels(doc, "cancels")
    assert (interrupt["id"], "run:main:1", "exact_unique") in cancels
    assert (interrupt["id"], "input:main:in3", "strong_inference") in cancels
    assert (interrupt["id"], "step:main:tu1", "strong_inference") in cancels
    [command] = kinds(doc, "control.command")
    assert (command["id"], "input:main:in2", "exact_unique") in cancels
    [tool] = kinds(doc, "tool")
    assert tool["attrs"]["status"] == "interrupted"


async def test_a_call_in_flight_has_no_content_to_show() -> None:
    doc = document(await session_of(("main", good_turn()[:4])))
    [call] = kinds(doc, "llm.call")
    assert call["content"] == "unavailable" and not kinds(doc, "message.assistant")


# -- compaction --------------------------------------------------------------------


async def test_compaction_cuts_an_epoch_with_a_boundary_and_its_summary() -> None:
    events: list[Event] = [
        *good_turn(),
        CompactionStarted(attempt_id="c1", basis=10),
        CompactionCommitted(
            attempt_id="c1",
            basis=10,
            summary=Message(role="user", blocks=(Text(text="we added"),), derived=True),
            replaced=4,
            retained=0,
        ),
        InputQueued(input_id="in2", messages=(user("again"),)),
        TurnStarted(turn=2, input_ids=("in2",)),
        ModelCallStarted(effect_id="e3", turn=2, step=0, model="m"),
        ModelMessageCommitted(effect_id="e3", turn=2, step=0, message=assistant("2")),
        TurnEnded(turn=2, outcome="completed"),
    ]
    doc = document(await session_of(("main", events)))
    [boundary], [summary] = kinds(doc, "epoch.boundary"), kinds(doc, "epoch.summary")
    assert boundary["parent"] == summary["parent"] == "epoch:main:1"
    assert summary["text"] == "we added"
    assert rels(doc, "summarizes") == {(summary["id"], boundary["id"], "exact_unique")}
    assert rels(doc, "follows") == {("epoch:main:1", "epoch:main:0", "exact_unique")}


# -- content states ----------------------------------------------------------------


async def test_a_redacted_tool_input_shows_redacted() -> None:
    events = good_turn()
    events[5] = ToolStarted(
        execution_id="x1",
        tool_use_id="tu1",
        name="add",
        input={"a": 1},  # the redacted form, as the model's message holds it too
        input_digest="ab" * 32,
    )
    doc = document(await session_of(("main", events)))
    [tool] = kinds(doc, "tool")
    assert tool["content"] == "redacted"
    assert tool["attrs"]["input"] == {"a": 1}


async def test_a_payload_past_the_limit_is_held_by_size_only() -> None:
    big = "x" * 5000
    events = good_turn()
    events[6] = tool_done("x1", "tu1", big)
    held = document(await session_of(("main", events)), content_limit=10_000)
    [tool] = kinds(held, "tool")
    assert (tool["content"], tool["text"], tool["size"]) == ("available", big, 5000)
    cut = document(await session_of(("main", events)), content_limit=1000)
    [tool] = kinds(cut, "tool")
    assert (tool["content"], tool["text"], tool["size"]) == ("size_only", "", 5000)


async def test_a_result_cut_to_its_limit_and_a_reply_cut_short_are_truncated() -> None:
    events = good_turn()
    events[6] = ToolCompleted(
        execution_id="x1",
        tool_use_id="tu1",
        content=(Text(text="12"),),
        disposition="succeeded",
        truncated_bytes=4096,
    )
    events[8] = ModelMessageCommitted(
        effect_id="e2",
        turn=1,
        step=1,
        message=Message(role="assistant", blocks=(Text(text="it is"), Text(text="[cut]"))),
        notice="truncated",
    )
    doc = document(await session_of(("main", events)))
    [tool] = kinds(doc, "tool")
    assert (tool["content"], tool["text"]) == ("truncated", "12")
    [reply] = [n for n in kinds(doc, "message.assistant") if n["attrs"]["notice"]]
    assert (reply["content"], reply["text"]) == ("truncated", "it is")


# -- collaboration and forks ----------------------------------------------------------


async def test_a_collaborations_own_stream_is_auxiliary() -> None:
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
    doc = document(await session_of(("main", good_turn()), ("collab:c1", [collab])))
    roles = {n["id"]: n["role"] for n in kinds(doc, "stream")}
    assert roles == {"stream:main": "main", "stream:collab:c1": "auxiliary"}


async def test_a_conversation_groups_a_session_with_its_fork_source() -> None:
    fork = SessionForked(source="ses_source", seq=7, digest=b"\0" * 32)
    doc = document(await session_of((CHECKPOINT_STREAM, [fork]), ("main", good_turn())))
    [root] = kinds(doc, "conversation")
    assert root["id"] == "conversation:ses_source"
    sessions = {n["id"]: n for n in kinds(doc, "session")}
    assert set(sessions) == {"session:ses_source", f"session:{SESSION}"}
    assert sessions["session:ses_source"]["claim"] == "observed_report_only"
    assert sessions[f"session:{SESSION}"]["attrs"]["forked_from"] == {
        "session": "ses_source",
        "seq": 7,
    }


async def test_every_kind_is_the_seeds() -> None:
    seen: set[str] = set()
    for records in (await foreground(), await background()):
        seen |= {n["kind"] for n in document(records)["nodes"]}
    assert set(STRUCTURAL_KINDS) <= seen


# -- the property -------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    scenario=st.sampled_from(["foreground", "old", "background"]),
    cut=st.integers(min_value=0, max_value=40),
    limit=st.integers(min_value=0, max_value=64),
)
def test_every_prefix_is_well_formed(scenario: str, cut: int, limit: int) -> None:
    import trio

    async def records() -> list[Record]:
        if scenario == "background":
            return await background()
        return await foreground(exact=scenario == "foreground")

    every = trio.run(records)
    document(every[:cut], content_limit=limit)


async def test_thinking_a_gate_and_a_turns_duration_are_steps_of_their_run() -> None:
    events = good_turn()
    events[4] = ModelMessageCommitted(
        effect_id="e1",
        turn=1,
        step=0,
        message=Message(
            role="assistant",
            blocks=(
                Thinking(thinking="one plus nothing", signature="s"),
                ToolUse(id="tu1", name="add", input={"a": 1}),
            ),
        ),
        stop_reason="tool_use",
    )
    events.insert(6, GateOpened(gate_id="g1", kind="permission", execution_id="x1", prompt="ok?"))
    doc = document(await session_of(("main", events)))
    [thinking] = kinds(doc, "thinking")
    assert (thinking["content"], thinking["size"]) == ("size_only", len("one plus nothing"))
    [gate] = kinds(doc, "control.permission")
    assert gate["claim"] == "proposed" and gate["text"] == "ok?"
    [duration] = kinds(doc, "turn.duration")
    assert duration["claim"] == "observed_report_only" and duration["attrs"]["duration_ns"] >= 0
    assert {n["parent"] for n in (thinking, gate, duration)} == {"run:main:1"}


async def test_every_kind_the_seed_names_is_made() -> None:
    from tests.replay.test_unified_inputs import (
        test_a_hooks_context_is_injected_into_the_call_it_ran_before,
    )

    seen: set[str] = set()
    for records in (await foreground(), await background()):
        seen |= {n["kind"] for n in document(records)["nodes"]}
    for test in (
        test_synthetic_messages_and_notices_never_count_as_agent_output,
        test_an_interrupt_cancels_its_run_and_the_tool_it_cut,
        test_compaction_cuts_an_epoch_with_a_boundary_and_its_summary,
        test_thinking_a_gate_and_a_turns_duration_are_steps_of_their_run,
        test_a_hooks_context_is_injected_into_the_call_it_ran_before,
    ):
        made.clear()
        await test()
        seen |= made
    assert set(typing.get_args(NodeKind)) == seen


async def test_steering_is_external_input_inside_the_run_it_steered() -> None:
    events = good_turn()
    events[5:5] = [SteerQueued(steer_id="s1", text="in euros"), SteerApplied(steer_ids=("s1",))]
    doc = document(await session_of(("main", events)))
    [steer] = [n for n in kinds(doc, "message.external") if n["attrs"].get("steer_id")]
    assert steer["parent"] == "run:main:1" and steer["text"] == "in euros"
    assert steer["seqs"] == [6, 7]
    # Steering never begins a talk of its own.
    assert len(kinds(doc, "talk")) == 1


async def test_a_result_whose_field_and_text_disagree_is_a_conflict() -> None:
    wrong = InputQueued(
        input_id="res-kid",
        messages=(user("[result of child loop other (completed)]\nChez Nous"),),
        trigger="subagent",
        child_loop="kid",
    )
    records = await session_of(
        ("main", [*delegating("x1", "tu1"), started("kid"), started("other")]),
        ("kid", child_run("kid")),
        ("other", child_run("other")),
        ("main", [ChildFinished(child_loop="kid", status="completed", output="x"), wrong]),
    )
    doc = document(records)
    assert rels(doc, "reports") == {
        ("input:main:res-kid", "stream:kid", "conflict"),
        ("input:main:res-kid", "stream:other", "conflict"),
    }


@pytest.mark.parametrize("limit", [-1, 1.5, True, "64KiB", None])
async def test_a_content_limit_that_is_no_count_of_bytes_is_refused(limit: object) -> None:
    records = await session_of(("main", good_turn()))
    with pytest.raises(ValueError, match="content_limit"):
        build_unified(SESSION, records, content_limit=limit)  # type: ignore[arg-type]


async def test_every_relation_names_what_joined_its_ends() -> None:
    def via(doc: Doc) -> dict[tuple[str, str, str], list[str]]:
        return {(r["type"], r["from"], r["to"]): r["via"] for r in doc["relations"]}

    exact, old = via(document(await foreground())), via(document(await foreground(exact=False)))
    note = "input:main:res-kid"
    assert exact[("starts", "step:main:tu1", "stream:kid")] == ["x1"]  # the execution id
    assert exact[("reports", note, "stream:kid")] == ["kid"]  # the child loop id
    assert exact[("ends_with", "stream:kid", "output:kid")] == ["kid"]
    assert exact[("input_of", note, "call:main:r2")] == [note]
    # An inference names its rule, not an id.
    assert old[("reports", note, "stream:kid")] == ["input text"]
    assert exact[("input_of", "step:main:tu1", "call:main:r2")] == ["the fold's order"]


async def test_records_out_of_order_or_of_another_session_are_refused() -> None:
    records = await session_of(("main", good_turn()))
    stranger = msgspec.structs.replace(records[3], session="ses_other")
    for bad, why in (
        (records[::-1], "ascending"),
        ([*records[:3], records[2], *records[3:]], "ascending"),
        ([*records[:3], stranger, *records[4:]], "ses_other"),
    ):
        with pytest.raises(ValueError, match=why):
            build_unified(SESSION, bad)
