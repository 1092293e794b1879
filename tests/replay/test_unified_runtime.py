"""The unified model of journals the runtime wrote: children foreground and
background join exactly; the same journal with the child loop id taken off
its result input (as journals before the field read) joins by inference."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import trio

from journal import Record, open_journal
from journal.events import InputQueued
from loopruntime import Delegate, LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.replay import build_unified, unified_json
from tests.replay.test_unified import ancestors, assert_well_formed, kinds, rels
from tests.support.loops import records


async def delegation(*, background: bool) -> tuple[str, list[Record]]:
    lead_model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="research", input={"task": "find X"})]),
            Reply(text="asked"),
            Reply(text="X is 42"),
        ]
    )
    helper = LoopDefinition(
        name="researcher", model=ScriptedModel([Reply(text="X=42", chunk_delay=5.0)])
    )
    lead = LoopDefinition(
        name="lead",
        model=lead_model,
        delegates=[
            Delegate(
                name="research", description="Research", definition=helper, background=background
            )
        ],
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, lead) as s:
            await s.submit("what is X?")
            await s.wait_idle()
        return s.id, await records(journal, s.id)


def document(session_id: str, recs: list[Record]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(unified_json(build_unified(session_id, recs)))
    assert_well_formed(doc)
    return doc


def as_old(recs: list[Record]) -> list[Record]:
    """The records as a journal from before ``input.queued`` named its child."""
    out = []
    for r in recs:
        if isinstance(r.event, InputQueued) and r.event.child_loop is not None:
            r = msgspec.structs.replace(r, event=msgspec.structs.replace(r.event, child_loop=None))
        out.append(r)
    return out


async def test_a_foreground_child_joins_exactly(autojump_clock: trio.abc.Clock) -> None:
    session_id, recs = await delegation(background=False)
    doc = document(session_id, recs)
    [call] = kinds(doc, "agent.call")
    [child] = [s for s in kinds(doc, "stream") if s["role"] == "child"]
    [note] = kinds(doc, "runtime.notification")
    [output] = kinds(doc, "agent.output")
    assert (call["id"], child["id"], "exact_unique") in rels(doc, "starts")
    assert (note["id"], child["id"], "exact_unique") in rels(doc, "reports")
    assert (child["id"], output["id"], "exact_unique") in rels(doc, "ends_with")
    assert output["text"] == "X=42" and child["id"] in ancestors(doc, output["id"])
    # The call's result came back as the call's result: one step, not two.
    assert call["text"] == "X=42" and note["parent"] == call["parent"]


async def test_a_background_child_joins_exactly_and_old_journals_by_inference(
    autojump_clock: trio.abc.Clock,
) -> None:
    session_id, recs = await delegation(background=True)
    assert any(isinstance(r.event, InputQueued) and r.event.child_loop for r in recs)
    new, old = document(session_id, recs), document(session_id, as_old(recs))
    for doc, quality in ((new, "exact_unique"), (old, "strong_inference")):
        [child] = [s for s in kinds(doc, "stream") if s["role"] == "child"]
        [note] = kinds(doc, "runtime.notification")
        [call] = kinds(doc, "agent.call")
        assert rels(doc, "reports") == {(note["id"], child["id"], quality)}
        assert (note["id"], call["id"], quality) in rels(doc, "result_of")
        # The result is read by the call that resumes the parent, by input id.
        [(_, resumed, joined)] = [r for r in rels(doc, "input_of") if r[0] == note["id"]]
        assert joined == "exact_unique" and resumed.startswith("call:main:")
        # The parent's resumption continues the talk its input began.
        main_talks = [t for t in kinds(doc, "talk") if t["id"].startswith("talk:main:")]
        assert [t["trigger"] for t in main_talks] == ["external"]
