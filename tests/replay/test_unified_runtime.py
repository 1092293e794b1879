"""The unified model of journals the runtime wrote: children foreground and
background join exactly; the same journal with the child loop id taken off
its result input (as journals before the field read) joins by inference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import trio

from journal import Draft, Record, open_journal
from journal.events import InputQueued, TurnEnded
from journal.memory import MemoryJournal
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


async def test_a_real_redacted_tool_shows_only_its_redacted_input() -> None:
    from tests.redaction.test_redaction import SECRET, Seen
    from tests.redaction.test_redaction import definition as login

    async with open_journal("memory:") as journal:
        async with Session.create(journal, login(Seen())) as s:
            await s.submit("log in")
            await s.wait_idle()
        recs = await records(journal, s.id)
    doc = document(s.id, recs)
    [tool] = kinds(doc, "tool")
    assert tool["content"] == "redacted"
    assert SECRET not in json.dumps(doc)


async def test_a_real_fork_is_a_session_of_its_sources_conversation(tmp_path: Path) -> None:
    from tests.fork.test_fork import run_scenario
    from tests.support import crash_points as scenario

    journal = MemoryJournal()
    source = await run_scenario(journal, tmp_path)
    first_turn = next(r for r in source if isinstance(r.event, TurnEnded))
    ledger = scenario.Ledger(tmp_path, "fork")
    async with Session.fork(
        journal,
        scenario.SESSION,
        scenario.definition(ledger),
        at=first_turn.seq,
        new_session_id="ses_fork",
    ) as fork:
        await fork.submit("and in Rome?")
        await fork.wait_idle()
    doc = document("ses_fork", await records(journal, "ses_fork"))
    [root] = kinds(doc, "conversation")
    assert root["id"] == f"conversation:{scenario.SESSION}"
    sessions = {n["id"]: n["claim"] for n in kinds(doc, "session")}
    assert sessions == {
        f"session:{scenario.SESSION}": "observed_report_only",
        "session:ses_fork": "observed_replayable",
    }
    # The fork's own talk: the inherited conversation is the source's.
    assert [t["trigger"] for t in kinds(doc, "talk")] == ["external"]
    # A fork of the fork is still of the first session's conversation.
    head = await journal.head("ses_fork")
    async with Session.fork(
        journal, "ses_fork", scenario.definition(ledger), at=head, new_session_id="ses_fork2"
    ) as again:
        await again.wait_idle()
    doc = document("ses_fork2", await records(journal, "ses_fork2"))
    [root] = kinds(doc, "conversation")
    assert root["id"] == f"conversation:{scenario.SESSION}"
    assert {n["id"] for n in kinds(doc, "session")} == {"session:ses_fork", "session:ses_fork2"}


async def test_a_real_collaboration_has_an_auxiliary_stream_and_its_workers_streams(
    autojump_clock: trio.abc.Clock,
) -> None:
    from session.embedded.collaboration import Collaboration, Decision
    from tests.children.test_collaboration_grammar import FAST, HOST, scripted, task

    collab = Collaboration(
        coordinator=scripted([Decision(mode="wait", tasks=(task("a"),))]), workers=[FAST]
    )
    async with open_journal("memory:") as journal:
        async with Session.create(journal, HOST) as s:
            assert await s.collaborate(collab, "go", collab_id="g") == "a=completed"
        recs = await records(journal, s.id)
    doc = document(s.id, recs)
    roles = {n["id"]: n["role"] for n in kinds(doc, "stream")}
    assert roles.pop("stream:collab:g") == "auxiliary"
    # The worker ran in a stream of its own, hanging from the session.
    assert roles and set(roles.values()) <= {"main", "child"}
    assert all(n["parent"] == f"session:{s.id}" for n in kinds(doc, "stream"))
    outputs = [n for n in kinds(doc, "message.assistant") if n["text"] == "fast result"]
    assert len(outputs) == 1


async def test_a_result_stored_by_reference_is_held_as_any_payload(tmp_path: Path) -> None:
    """A tool result past the blob threshold goes by reference in a real
    SQLite file; the document reads it back whole, so the content limit alone
    decides ``available`` or ``size_only``."""
    from journal.blobs import MARK
    from tests.blobs.backends import Backend, sqlite_url
    from tests.replay.bad import SESSION, good_turn
    from tests.replay.test_unified import tool_done

    big = "y" * 5000
    events = good_turn()
    events[6] = tool_done("x1", "tu1", big)
    backend = Backend("sqlite", sqlite_url(tmp_path))
    async with backend.open(threshold=1024) as journal:
        lease = await journal.open_session(SESSION)
        for seq, event in enumerate(events):
            draft = Draft(id=f"r{seq}", loop="main", event=event)
            await journal.append(lease, [draft], expected_seq=seq)
        recs = await records(journal, SESSION)
    assert (await backend.stored_body(SESSION, 7))[0] == MARK  # the result is a reference
    for limit, held in ((10_000, ("available", big)), (1000, ("size_only", ""))):
        doc: dict[str, Any] = json.loads(
            unified_json(build_unified(SESSION, recs, content_limit=limit))
        )
        assert_well_formed(doc)
        [tool] = kinds(doc, "tool")
        assert (tool["content"], tool["text"]) == held and tool["size"] == 5000


async def test_a_real_provider_error_is_an_api_error_and_never_agent_output() -> None:
    from loopruntime import ModelError
    from session.replay.unified import counts_as_agent_output

    refused = ModelError("no such model", kind="not_found", code="model.not_found", status=404)
    asker = LoopDefinition(name="asker", model=ScriptedModel([Reply(error=refused)]))
    async with open_journal("memory:") as journal:
        async with Session.create(journal, asker) as s:
            await s.submit("hi")
            await s.wait_idle()
        recs = await records(journal, s.id)
    doc = document(s.id, recs)
    [call] = kinds(doc, "llm.call")
    [error] = kinds(doc, "error.api")
    assert error["attrs"]["code"] == "model.not_found" and error["parent"] == call["parent"]
    # Nothing arrived: the runtime's notice is for readers, not the model's words.
    assert [n["attrs"]["code"] for n in kinds(doc, "control.notice")] == ["truncated"]
    assert not [n for n in doc["nodes"] if counts_as_agent_output(n["kind"])]
