"""The unified model's inputs and edges: what an ``llm.call`` read (its
manifest), context the runtime injected, joins it cannot make (``unresolved``),
content deliberately left out (``omitted``) or held as a digest (``hash_only``),
and a collaboration's coordinator as a ``judge``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from journal import Record, open_journal
from journal.content import Message, Text
from journal.events import (
    CHECKPOINT_STREAM,
    ChildFinished,
    CompactionCommitted,
    CompactionStarted,
    Event,
    HookDecided,
    InputQueued,
    ModelCallStarted,
    ModelMessageCommitted,
    SessionForked,
    TurnEnded,
    TurnStarted,
)
from loopruntime import AddContext, BeforeModel, Limits, LoopDefinition, hook
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import FINAL_ANSWER, OUTPUT_REQUIRED
from session import Session
from session.replay import build_unified, unified_json
from session.replay.unified_facts import REMINDER_CODE
from tests.replay.bad import assistant, good_turn, user
from tests.replay.test_unified import (
    assert_well_formed,
    delegating,
    document,
    kinds,
    rels,
    session_of,
    started,
)
from tests.support.loops import records


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in doc["nodes"]}


def real(session_id: str, recs: list[Record], **kw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(unified_json(build_unified(session_id, recs, **kw)))
    assert_well_formed(doc)
    return doc


# -- the manifest ------------------------------------------------------------------


async def test_a_calls_manifest_names_the_records_its_input_was_built_from() -> None:
    recs = await session_of(("main", good_turn()))
    doc = document(recs)
    first, second = kinds(doc, "llm.call")
    assert first["manifest"]["seqs"] == [2] and first["manifest"]["nodes"] == ["input:main:in1"]
    # The second call read the input, the first reply (its text and its tool
    # use) and the tool's result, in the order the context holds them.
    assert second["manifest"]["seqs"] == [2, 5, 7]
    assert second["manifest"]["nodes"] == [
        "input:main:in1",
        "call:main:e1:message",
        "step:main:tu1",
    ]
    assert second["manifest"]["after"] is None and not second["manifest"]["inherited"]
    # Each node is input of the first call that read it, once.
    assert rels(doc, "input_of") == {
        ("input:main:in1", first["id"], "exact_unique"),
        ("call:main:e1:message", second["id"], "strong_inference"),
        ("step:main:tu1", second["id"], "strong_inference"),
    }


async def test_after_a_compaction_the_input_starts_after_its_summary() -> None:
    events: list[Event] = [
        *good_turn(),
        CompactionStarted(attempt_id="c1", basis=10),
        CompactionCommitted(
            attempt_id="c1",
            basis=10,
            summary=Message(role="user", blocks=(Text(text="we added"),), derived=True),
            replaced=3,
            retained=1,
        ),
        InputQueued(input_id="in2", messages=(user("again"),)),
        TurnStarted(turn=2, input_ids=("in2",)),
        ModelCallStarted(effect_id="e3", turn=2, step=0, model="m", fingerprint="ab12"),
        ModelMessageCommitted(effect_id="e3", turn=2, step=0, message=assistant("2")),
        TurnEnded(turn=2, outcome="completed"),
    ]
    doc = document(await session_of(("main", events)))
    call = by_id(doc)["call:main:e3"]
    manifest = call["manifest"]
    assert manifest["after"] == "summary:c1"
    # The summary, the one message it kept (the last reply), the new input.
    assert manifest["nodes"] == ["summary:c1", "call:main:e2:message", "input:main:in2"]
    assert manifest["seqs"] == [12, 9, 13]
    assert ("summary:c1", call["id"], "exact_unique") in rels(doc, "input_of")
    # The request itself is held as its digest only.
    assert (manifest["request"], manifest["fingerprint"]) == ("hash_only", "ab12")
    assert by_id(doc)["call:main:e1"]["manifest"]["request"] == "unavailable"


async def test_a_forks_first_input_is_inherited_from_its_source() -> None:
    from tests.replay.bad import checkpoint_of

    base = good_turn()
    fork = SessionForked(source="ses_source", seq=10, digest=b"\0" * 32)
    second: list[Event] = [
        InputQueued(input_id="in2", messages=(user("and more"),)),
        TurnStarted(turn=2, input_ids=("in2",)),
        ModelCallStarted(effect_id="e3", turn=2, step=0, model="m"),
    ]
    recs = await session_of(
        (CHECKPOINT_STREAM, [fork, checkpoint_of(base)]),
        ("main", second),
    )
    doc = document(recs)
    manifest = by_id(doc)["call:main:e3"]["manifest"]
    assert manifest["inherited"] and manifest["nodes"] == ["input:main:in2"]
    # The source's records are another session's: deliberately not here.
    assert by_id(doc)["session:ses_source"]["content"] == "omitted"


# -- context.injection -----------------------------------------------------------------


async def test_a_hooks_context_is_injected_into_the_call_it_ran_before() -> None:
    events = good_turn()
    hooked = HookDecided(
        hook="today", point="before_model", action="context", text="a holiday", turn=1, step=1
    )
    events.insert(7, hooked)
    doc = document(await session_of(("main", events)))
    [injection] = kinds(doc, "context.injection")
    assert injection["id"] == "injection:main:8" and injection["parent"] == "run:main:1"
    assert injection["text"] == "a holiday" and injection["attrs"]["hook"] == "today"
    assert (injection["id"], "call:main:e2", "exact_unique") in rels(doc, "input_of")
    assert not kinds(doc, "control.notice")


async def test_input_the_runtime_wrote_is_injected_context_not_a_person() -> None:
    written = Message(role="user", blocks=(Text(text="the time is 9"),), synthetic=True)
    events = good_turn()
    events[1] = InputQueued(input_id="in1", messages=(written,))
    doc = document(await session_of(("main", events)))
    [injection] = kinds(doc, "context.injection")
    assert injection["id"] == "input:main:in1" and not kinds(doc, "message.external")


async def test_the_runtimes_reminder_is_injected_and_a_persons_steering_is_external(
    autojump_clock: trio.abc.Clock,
) -> None:
    assert REMINDER_CODE == OUTPUT_REQUIRED
    model = ScriptedModel(
        [
            Reply(text="it is cold"),
            Reply(tool_calls=[ToolCall(name=FINAL_ANSWER, input={"value": 3})]),
        ]
    )
    definition = LoopDefinition(name="typed", model=model, output=int, limits=Limits())
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("how cold?")
            await s.wait_idle()
        recs = await records(journal, s.id)
    doc = real(s.id, recs)
    [reminder] = kinds(doc, "context.injection")
    assert reminder["attrs"]["source"] == "reminder"
    assert not [n for n in kinds(doc, "message.external") if "steer_id" in n["attrs"]]
    _, second = kinds(doc, "llm.call")
    assert (reminder["id"], second["id"], "exact_unique") in rels(doc, "input_of")


async def test_a_real_hooks_context_is_an_injection(autojump_clock: trio.abc.Clock) -> None:
    @hook("before_model")
    async def today(call: BeforeModel) -> AddContext | None:
        return AddContext("today is a holiday") if call.step == 0 else None

    definition = LoopDefinition(
        name="hooked", model=ScriptedModel([Reply(text="noted")]), hooks=[today]
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, definition) as s:
            await s.submit("plan my day")
            await s.wait_idle()
        recs = await records(journal, s.id)
    doc = real(s.id, recs)
    [injection] = kinds(doc, "context.injection")
    [call] = kinds(doc, "llm.call")
    assert injection["text"] == "today is a holiday"
    assert call["manifest"]["nodes"][-1] == injection["id"]
    assert call["manifest"]["request"] == "hash_only"


# -- unresolved ----------------------------------------------------------------------


async def test_a_result_naming_a_child_absent_from_the_journal_is_unresolved() -> None:
    ghost = InputQueued(
        input_id="res-ghost",
        messages=(user("[result of child loop ghost (completed)]\nhi"),),
        trigger="notification",
        child_loop="ghost",
    )
    doc = document(await session_of(("main", [*good_turn(), ghost])))
    nodes = by_id(doc)
    assert rels(doc, "reports") == {("input:main:res-ghost", "stream:ghost", "unresolved")}
    assert nodes["stream:ghost"]["claim"] == "unavailable"
    [(_, call, quality)] = rels(doc, "result_of")
    assert quality == "unresolved" and nodes[call]["claim"] == "unavailable"
    assert nodes[call]["kind"] == "agent.call"


async def test_a_child_finishing_that_no_call_started_is_kept_unresolved() -> None:
    events = good_turn()
    events.insert(6, ChildFinished(child_loop="stray", status="completed", output="x"))
    doc = document(await session_of(("main", events)))
    [note] = kinds(doc, "runtime.notification")
    assert note["parent"] == "run:main:1"
    assert rels(doc, "reports") == {(note["id"], "stream:stray", "unresolved")}
    assert {q for _, _, q in rels(doc, "result_of")} == {"unresolved"}


async def test_a_tool_result_whose_call_no_reply_asked_for_is_kept_unresolved() -> None:
    from tests.replay.test_unified import tool_done

    events = good_turn()
    events.insert(9, tool_done("x9", "tu9", "stray"))  # inside the run
    events.append(tool_done("x8", "tu8", "late"))  # after it
    doc = document(await session_of(("main", events)))
    nodes = by_id(doc)
    assert nodes["step:main:tu9"]["parent"] == "run:main:1"
    assert nodes["step:main:tu8"]["parent"] == "epoch:main:0"
    assert nodes["step:main:tu8"]["text"] == "late"
    assert rels(doc, "result_of") == {
        ("step:main:tu9", "use:main:tu9", "unresolved"),
        ("step:main:tu8", "use:main:tu8", "unresolved"),
    }
    assert {nodes[f"use:main:{t}"]["claim"] for t in ("tu8", "tu9")} == {"unavailable"}
    # The call the reply did ask for joins as ever.
    assert nodes["step:main:tu1"]["claim"] == "observed_replayable"


async def test_a_childs_start_recorded_again_by_a_restore_is_one_join_not_two() -> None:
    from tests.replay.test_unified import child_result, child_run

    records = await session_of(
        ("main", [*delegating("x1", "tu1"), started("kid", background=True)]),
        ("main", [started("kid", background=True)]),  # a restore re-attaching the child
        ("kid", child_run("kid")),
        ("main", child_result("kid", exact=True, background=True)),
    )
    doc = document(records)
    assert len(kinds(doc, "agent.launch_ack")) == 2  # two records, two acknowledgements
    assert [(r["from"], r["to"]) for r in doc["relations"] if r["type"] == "starts"] == [
        ("step:main:tu1", "stream:kid")
    ]
    [note] = kinds(doc, "runtime.notification")
    assert {(t, q) for f, t, q in rels(doc, "result_of") if f == note["id"]} == {
        ("step:main:tu1", "exact_unique")
    }


async def test_a_child_started_by_a_call_is_not_unresolved() -> None:
    doc = document(await session_of(("main", [*delegating("x1", "tu1"), started("kid")])))
    assert not [r for r in doc["relations"] if r["quality"] == "unresolved"]


# -- omitted ---------------------------------------------------------------------------


async def test_omit_content_leaves_every_body_out_and_keeps_sizes() -> None:
    recs = await session_of(("main", good_turn()))
    doc = document(recs, omit_content=True)
    held = [n for n in doc["nodes"] if n["content"] is not None and n["kind"] != "llm.call"]
    assert held and all(n["content"] == "omitted" and n["text"] == "" for n in held)
    [reply] = [n for n in kinds(doc, "message.assistant") if n["id"] == "call:main:e2:message"]
    assert reply["size"] == len("it is 1")


# -- judge -----------------------------------------------------------------------------


async def test_a_collaborations_coordinator_loop_is_a_judge(
    autojump_clock: trio.abc.Clock,
) -> None:
    from session.embedded.collaboration import Collaboration
    from tests.children.test_collaboration_grammar import FAST, HOST

    plan = [
        '{"mode": "wait", "tasks": [{"key": "a", "worker": "fast", "input": "go"}]}',
        '{"mode": "complete", "output": "all done"}',
    ]
    coordinator = LoopDefinition(
        name="lead", model=ScriptedModel([Reply(text=text) for text in plan])
    )
    collab = Collaboration(coordinator=coordinator, workers=[FAST])
    async with open_journal("memory:") as journal:
        async with Session.create(journal, HOST) as s:
            assert await s.collaborate(collab, "go", collab_id="g") == "all done"
        recs = await records(journal, s.id)
    doc = real(s.id, recs)
    roles = {n["id"]: n["role"] for n in kinds(doc, "stream")}
    assert roles.pop("stream:collab:g") == "auxiliary"
    assert roles.pop("stream:collab:g/coordinator") == "judge"
    assert set(roles.values()) <= {"main", "child"}


async def test_a_rewritten_tool_call_keeps_the_reply_it_came_from_in_the_manifest() -> None:
    events = good_turn()
    rewrite = HookDecided(
        hook="guard",
        point="before_tool",
        action="rewrite",
        tool_use_id="tu1",
        input={"a": 2},
        original={"a": 1},
    )
    events.insert(5, rewrite)
    doc = document(await session_of(("main", events)))
    manifest = by_id(doc)["call:main:e2"]["manifest"]
    assert manifest["nodes"] == ["input:main:in1", "call:main:e1:message", "step:main:tu1"]
    assert not kinds(doc, "context.injection")


def test_the_command_leaves_bodies_out_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.replay.test_cli import make_journal, replay
    from tests.support import crash_points as scenario

    db = str(make_journal(tmp_path))
    code, out, _ = replay(capsys, "--journal", db, scenario.SESSION, "--format", "unified")
    full = {n["id"]: n for n in json.loads(out)["nodes"]}
    with_text = {i for i, n in full.items() if n["text"]}
    assert code == 0 and with_text
    args = ("--journal", db, scenario.SESSION, "--format", "unified", "--no-content")
    code, out, _ = replay(capsys, *args)
    bare = {n["id"]: n for n in json.loads(out)["nodes"]}
    assert code == 0 and set(bare) == set(full)
    for i in with_text:
        assert (bare[i]["content"], bare[i]["text"]) == ("omitted", "")
        assert bare[i]["size"] == full[i]["size"]
    code, _, err = replay(capsys, "--journal", db, scenario.SESSION, "--no-content")
    assert code == 2 and "--format unified only" in err
