"""The conversation tree, its JSON form, time travel and the transcript."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from journal import Draft, Record, open_journal
from journal.content import Message, Text
from journal.events import (
    ChildFinished,
    ChildStarted,
    Event,
    GateOpened,
    InputCancelled,
    InputQueued,
    LoopStarted,
    ModelCallStarted,
    ModelMessageCommitted,
    Notice,
    Provenance,
    ToolAbandoned,
    ToolCompleted,
    ToolResolved,
    TurnEnded,
    TurnStarted,
)
from loopruntime import INTERRUPTED_NOTICE
from session import Session
from session.embedded.restore import read_states
from session.replay import (
    TREE_SCHEMA,
    TREE_VERSION,
    ModelStep,
    ToolStep,
    Tree,
    build_tree,
    render_states,
    render_transcript,
    render_tree,
    states_at,
    tree_json,
    tree_json_schema,
)
from tests.replay.bad import SESSION, assistant, good_turn, opening, records_of, user
from tests.support import crash_points as scenario


async def scenario_records(tmp_path: Path) -> list[Record]:
    """The crash scenario run to its end on a memory journal, in this process."""
    ledger = scenario.Ledger(tmp_path, "run")
    async with open_journal("memory:") as journal:
        d = scenario.definition(ledger)
        async with Session.create(journal, d, session_id=scenario.SESSION) as s:
            await scenario.drive(s, ledger)
        return [r async for r in journal.read(scenario.SESSION)]


async def test_tree_of_the_scenario(tmp_path: Path) -> None:
    records = await scenario_records(tmp_path)
    tree = build_tree(scenario.SESSION, records)
    assert (tree.schema, tree.version, tree.head) == (TREE_SCHEMA, TREE_VERSION, records[-1].seq)
    [stream] = tree.streams
    assert stream.loop == "main" and stream.status == "idle"
    # One compaction: two epochs, the second opened by it.
    assert [e.index for e in stream.epochs] == [0, 1]
    assert stream.epochs[0].compaction is None
    compaction = stream.epochs[1].compaction
    assert compaction is not None and compaction.replaced > 0
    # Every request a person made opened a talk; each talk here is one run.
    talks = [t for e in stream.epochs for t in e.talks]
    assert [t.opened_by for t in talks] == ["external"] * 5
    assert [len(t.runs) for t in talks] == [1] * 5
    runs = [r for t in talks for r in t.runs]
    assert [r.outcome for r in runs] == ["completed"] * 5
    assert [r.turn for r in runs] == [1, 2, 3, 4, 5]
    # Run 1: a model step, two parallel tool steps, the final model step.
    kinds = [type(s).__name__ for s in runs[0].steps]
    assert kinds == ["ModelStep", "ToolStep", "ToolStep", "ModelStep"]
    forecasts = [s for s in runs[0].steps if isinstance(s, ToolStep)]
    assert {s.input["city"] for s in forecasts} == {"Paris", "Oslo"}
    assert all(s.status == "succeeded" and not s.synthetic for s in forecasts)
    # Run 2: the permission gate sits on its tool step; the steering on its run.
    [book] = [s for s in runs[1].steps if isinstance(s, ToolStep)]
    [permission] = book.gates
    assert (permission.kind, permission.status, permission.allow) == (
        "permission",
        "resolved",
        True,
    )
    assert runs[1].steering == [scenario.STEER]
    # Run 3: the question of the resumable tool, answered.
    [colour] = [s for s in runs[2].steps if isinstance(s, ToolStep)]
    assert [(g.kind, g.answer) for g in colour.gates] == [("user_input", scenario.ANSWER)]
    assert stream.stats.tool_calls == 5
    assert stream.stats.agent_messages == 9
    # The five requests, and the overflow input the host queued and withdrew.
    assert stream.stats.external_inputs == 6
    # Relations, each with its quality.
    by_kind = {(r.kind, r.quality) for r in tree.relations}
    assert {
        ("starts", "exact"),
        ("result_of", "exact"),
        ("ends_with", "exact"),
        ("follows", "inferred"),
        ("summarizes", "exact"),
    } <= by_kind
    nodes = {s.id for r in runs for s in r.steps} | {r.id for r in runs}
    nodes |= {i.id for i in stream.inputs} | {e.id for e in stream.epochs}
    nodes.add(f"stream:{stream.loop}")  # the host withdrew the overflow input ("cancels")
    assert all(r.source in nodes and r.target in nodes for r in tree.relations)
    for tool in forecasts:
        [rel] = [r for r in tree.relations if r.kind == "result_of" and r.source == tool.id]
        assert rel.target == runs[0].steps[0].id and rel.via == tool.tool_use_id
    text = render_tree(tree)
    assert "epoch 1" in text and "gate permission" in text and "steer: " in text


async def test_json_round_trip_and_schema(tmp_path: Path) -> None:
    records = await scenario_records(tmp_path)
    tree = build_tree(scenario.SESSION, records)
    raw = tree_json(tree)
    assert msgspec.json.decode(raw, type=Tree) == tree
    plain = json.loads(raw)
    assert (plain["schema"], plain["version"]) == (TREE_SCHEMA, TREE_VERSION)
    step = plain["streams"][0]["epochs"][0]["talks"][0]["runs"][0]["steps"][0]
    assert step["kind"] == "model"
    schema = tree_json_schema()
    assert "Tree" in schema["$defs"] and "ToolStep" in schema["$defs"]


async def test_synthetic_records_are_never_agent_output() -> None:
    # A crash left x1 unknown, the host resolved it; a reply was interrupted;
    # a reply was only the notice; a call was rejected.
    events: list[Event] = [
        *opening(),
        good_turn()[5],  # tool.started x1
        ToolAbandoned(execution_id="x1", tool_use_id="tu1", reason="crashed"),
        Notice(code="unknown_effects", text="x1 unknown", refs=("x1",)),
        ToolResolved(execution_id="x1", tool_use_id="tu1", content=(Text(text="host says"),)),
        ModelCallStarted(effect_id="e2", turn=1, step=1, model="m"),
        ModelMessageCommitted(
            effect_id="e2",
            turn=1,
            step=1,
            message=Message(
                role="assistant",
                blocks=(Text(text="partial"), Text(text=INTERRUPTED_NOTICE)),
            ),
            notice="interrupted",
        ),
        ModelCallStarted(effect_id="e3", turn=1, step=2, model="m"),
        ModelMessageCommitted(
            effect_id="e3",
            turn=1,
            step=2,
            message=Message(
                role="assistant", blocks=(Text(text=INTERRUPTED_NOTICE),), synthetic=True
            ),
            notice="interrupted",
        ),
        TurnEnded(turn=1, outcome="interrupted"),
        InputQueued(input_id="in2", messages=(user("and?"),)),
        TurnStarted(turn=2, input_ids=("in2",)),
        ModelCallStarted(effect_id="e4", turn=2, step=0, model="m"),
        ModelMessageCommitted(
            effect_id="e4", turn=2, step=0, message=assistant("nope", "tu9"), stop_reason="tool_use"
        ),
        ToolCompleted(
            execution_id="",
            tool_use_id="tu9",
            content=(Text(text="denied"),),
            disposition="rejected",
        ),
        TurnEnded(turn=2, outcome="failed"),
    ]
    tree = build_tree(SESSION, await records_of(events))
    [stream] = tree.streams
    steps = [s for t in stream.epochs[0].talks for r in t.runs for s in r.steps]
    models = [s for s in steps if isinstance(s, ModelStep)]
    tools = [s for s in steps if isinstance(s, ToolStep)]
    assert [m.text for m in models] == ["adding", "partial", "", "nope"]
    assert models[1].notice == "interrupted" and models[1].notice_text == INTERRUPTED_NOTICE
    assert models[2].synthetic
    assert [(t.status, t.synthetic) for t in tools] == [("resolved", True), ("rejected", True)]
    # "adding", "partial" and "nope" are the agent's; the notice-only reply is not.
    assert stream.stats.agent_messages == 3
    assert stream.stats.agent_chars == len("adding") + len("partial") + len("nope")
    assert stream.stats.tool_calls == 0
    assert stream.stats.synthetic_tool_results == 2
    assert stream.stats.synthetic_messages == 1
    assert stream.stats.notices == 1
    run1 = stream.epochs[0].talks[0].runs[0]
    assert [n.code for n in run1.notices] == ["unknown_effects"]


async def test_notifications_continue_the_talk_and_children_relate() -> None:
    provenance = Provenance(parent_loop="main", turn=1, step=0, execution_id="x1")
    main = [
        *good_turn()[:6],  # ... tool.started x1
        ChildStarted(child_loop="kid", definition="helper", provenance=provenance),
    ]
    child = [
        LoopStarted(definition="helper", model="m", parent=provenance),
        InputQueued(input_id="k1", messages=(user("help"),)),
        TurnStarted(turn=1, input_ids=("k1",)),
        ModelCallStarted(effect_id="k", turn=1, step=0, model="m"),
        ModelMessageCommitted(effect_id="k", turn=1, step=0, message=assistant("helped")),
        TurnEnded(turn=1, outcome="completed"),
    ]
    rest = [
        ChildFinished(child_loop="kid", status="completed", output="helped"),
        *good_turn()[6:],
        InputQueued(
            input_id="in2",
            messages=(user("[result of child loop kid]\nhelped"),),
            trigger="subagent",
        ),
        TurnStarted(turn=2, input_ids=("in2",)),
        TurnEnded(turn=2, outcome="completed"),
    ]
    records = [
        *await records_of(main),
    ]
    # One session, two loops: renumber the child's and the rest's records.
    from tests.replay.bad import journal_of

    journal = await journal_of([])
    lease = await journal.open_session(SESSION)
    seq = 0

    for loop, events in (("main", main), ("kid", child), ("main", rest)):
        for event in events:
            await journal.append(
                lease, [Draft(id=f"r{seq}", loop=loop, event=event)], expected_seq=seq
            )
            seq += 1
    records = [r async for r in journal.read(SESSION)]
    tree = build_tree(SESSION, records)
    main_stream, kid = tree.streams
    assert kid.parent_loop == "main" and kid.parent_execution == "x1"
    # The child's result came back as input: it continues the talk.
    [talk] = main_stream.epochs[0].talks
    assert [r.turn for r in talk.runs] == [1, 2]
    rels = {(r.kind, r.source, r.target, r.quality) for r in tree.relations}
    assert ("starts", "step:main:tu1", "stream:kid", "exact") in rels
    # The result's input reports the child (the unified model's direction);
    # this journal's input does not name its child, so the join is inferred.
    assert [r for r in rels if r[0] == "reports"] == [
        ("reports", "input:main:in2", "stream:kid", "inferred")
    ]
    lines = render_transcript(records).splitlines()
    helped = next(line for line in lines if "assistant: helped" in line)
    assert "    assistant: helped" in helped  # indented under its parent


async def test_time_travel(tmp_path: Path) -> None:
    records = await scenario_records(tmp_path)
    gate_seq = next(
        r.seq for r in records if isinstance(r.event, GateOpened) and r.event.kind == "permission"
    )
    states = states_at(records, gate_seq)
    main = states["main"]
    assert [g.gate_id for g in main.open_gates] and main.turn_open
    assert main.last_seq == gate_seq
    text = render_states(states, gate_seq)
    assert f"state as of seq {gate_seq}" in text
    assert "status awaiting_gate" in text and "open gate" in text and "Allow book_table" in text
    # The fold of the whole prefix is the fold restore does.
    async with open_journal("memory:") as journal:
        lease = await journal.open_session("copy")
        from journal import Draft

        for r in records:
            await journal.append(
                lease, [Draft(id=r.id, loop=r.loop, event=r.event)], expected_seq=r.seq - 1
            )
        assert states_at(records, records[-1].seq) == await read_states(journal, "copy")


async def test_cancels_and_retries() -> None:
    events: list[Event] = [
        *opening()[:4],  # seq 1-4: the turn's model call is in flight...
        ModelMessageCommitted(
            effect_id="e1",
            turn=1,
            step=0,
            message=Message(role="assistant", blocks=(Text(text="[truncated]"),), synthetic=True),
            notice="truncated",
        ),
        TurnEnded(turn=1, outcome="crashed", kind="runtime", code="runtime.crashed"),
        InputQueued(input_id="in2", messages=(user("add"),)),  # ...the host asks again
        InputQueued(input_id="in3", messages=(user("never mind"),)),
        InputCancelled(input_id="in3"),
        TurnStarted(turn=2, input_ids=("in2",)),
        TurnEnded(turn=2, outcome="completed"),
    ]
    tree = build_tree(SESSION, await records_of(events))
    rels = {(r.kind, r.source, r.target, r.quality) for r in tree.relations}
    assert ("retries", "run:main:2", "run:main:1", "inferred") in rels
    assert ("cancels", "stream:main", "input:main:in3", "exact") in rels
    inputs = {i.input_id: (i.status, i.run) for i in tree.streams[0].inputs}
    assert inputs == {
        "in1": ("consumed", "run:main:1"),
        "in2": ("consumed", "run:main:2"),
        "in3": ("cancelled", None),
    }


async def test_records_out_of_order_or_of_another_session_are_refused() -> None:
    """A tree folded from another session's records, or out of seq order, would
    be wrong without a word: it is a ValueError naming the first such record."""
    records = await records_of(good_turn())
    stranger = msgspec.structs.replace(records[3], session="ses_other")
    for bad, why in (
        (records[::-1], "ascending"),
        ([*records[:3], records[2], *records[3:]], "ascending"),
        ([*records[:3], stranger, *records[4:]], "ses_other"),
    ):
        with pytest.raises(ValueError, match=why):
            build_tree(SESSION, bad)
