"""The records and gate kinds beyond permission and free questions, as the
console shows and answers them: classifiers' reviews beside the permission
gate they preceded, hooks' decisions, deferred tools loaded, principals on
inputs and answers; form gates (fields from their JSON Schema, an answer as
data, the owner's refusal naming the field) and URL gates (a link only for
http(s), a confirmation with or without a value)."""

from __future__ import annotations

from typing import Any

import pytest

from journal import Record
from journal.events import GateOpened, GateResolved, GateReviewed, HookDecided, ToolsLoaded
from loopruntime import LoopState
from session import Session
from session.console.app import URL_CONFIRMED
from session.console.views import Reviews, TranscriptFeed, actions_of, form_fields, link_url
from session.embedded.checkpoints import SessionFolder
from session.replay import render_transcript
from tests.console.scenario import HOSTILE_URL, Parcel, gates_definition
from tests.console.support import running, wait_for
from tests.host.support import trio_clock_journal
from tests.support.loops import events_of

pytestmark = pytest.mark.usefixtures("autojump_clock")


def _shown(records: list[Record]) -> str:
    """What the page's transcript shows, line by line, seq column put back."""
    feed, out = TranscriptFeed(), []
    for r in records:
        for line in feed.item(r)["lines"]:
            text = "".join(t for _, t in line["spans"])
            out.append(f"{r.seq:>5} " + "    " * line["depth"] + text)
    return "\n".join(out)


async def _gates_session(*steps: Any) -> list[Record]:
    """A ``gates`` session driven in-process: each step a text to submit (by
    alice) or a callable given the session (to answer what it opened)."""
    journal = trio_clock_journal()
    async with Session.create(journal, gates_definition(), session_id="s") as s:
        for step in steps:
            if isinstance(step, str):
                await s.submit(step, principal="alice")
                await wait_for(lambda: _settled(s))
            else:
                await step(s)
                await s.wait_idle()
    return [r async for r in journal.read("s")]


async def _settled(s: Session) -> bool:
    from session.embedded.restore import read_states

    states = await read_states(s.journal, "s")
    return all(st.gates or not st.turn_open for st in states.values())


# -- the transcript: the replay tool's words ------------------------------------------


async def test_reviews_hooks_loaded_tools_and_principals_read_as_replay_says() -> None:
    async def allow(s: Session) -> None:
        [gate] = [r.event for r in await _read(s) if isinstance(r.event, GateOpened)]
        await s.decide(gate.gate_id, True, principal="bob")

    records = await _gates_session("deploy it", allow, "wipe it", "load it")
    shown = _shown(records)
    assert shown == render_transcript(records)
    assert "user [alice]: deploy it" in shown
    assert "~ classifier rules: ask deploy: deploy to prod needs a person" in shown
    assert "! allowed by bob (once)" in shown
    assert "⚑ hook guard (before_tool) denied call" in shown
    assert "wiping disks is not allowed here" in shown
    assert "(tools loaded: atlas)" in shown
    tags = [r.event for r in records]
    assert any(isinstance(e, GateReviewed) for e in tags)
    assert any(isinstance(e, HookDecided) and e.action == "deny" for e in tags)
    assert any(isinstance(e, ToolsLoaded) for e in tags)
    # Each kind is painted as the replay paints it.
    feed = TranscriptFeed()
    kinds = {}
    for r in records:
        for line in feed.item(r)["lines"]:
            for kind, text in line["spans"]:
                kinds[text.split(" ", 1)[0]] = kind
    assert kinds["~"] == "gate" and kinds["⚑"] == "notice"


async def _read(s: Session) -> list[Record]:
    return [r async for r in s.journal.read("s")]


async def test_a_form_answer_shows_who_answered_and_what() -> None:
    async def fill(s: Session) -> None:
        [gate] = [r.event for r in await _read(s) if isinstance(r.event, GateOpened)]
        await s.answer(gate.gate_id, {"city": "Oslo", "zip": 150}, principal="carol")

    records = await _gates_session("form it", fill)
    shown = _shown(records)
    assert shown == render_transcript(records)
    assert "form fields city, express, note, size, tags, zip" in shown
    assert '! answered by carol: {"city":"Oslo","zip":150' in shown


# -- the gate panel ------------------------------------------------------------------


async def test_a_permission_gate_carries_the_reviews_that_left_it_to_a_person() -> None:
    records = await _gates_session("deploy it")
    reviews, folder = Reviews(), SessionFolder()
    for r in records:
        folder.feed(r)
        reviews.feed(r)
    states = folder.states
    [gate] = actions_of(states, reviews)["gates"]
    assert gate["kind"] == "permission" and gate["tool"] == "deploy"
    [review] = gate["reviews"]
    assert review["classifier"] == "rules" and review["verdict"] == "ask"
    assert review["reason"] == "deploy to prod needs a person" and review["failed"] is False
    # Without the reviews tracked the gate shows none (never another call's).
    assert actions_of(states)["gates"][0]["reviews"] == []


def test_form_fields_from_a_json_schema() -> None:
    import msgspec

    fields = {f["name"]: f for f in form_fields(msgspec.json.schema(Parcel)) or []}
    assert list(fields) == ["city", "zip", "express", "size", "note", "tags"]
    assert fields["city"]["type"] == "string" and fields["city"]["required"]
    assert fields["city"]["description"] == "<script>alert('city')</script> the city"
    assert fields["zip"]["type"] == "integer" and fields["zip"]["required"]
    assert fields["express"]["type"] == "boolean" and not fields["express"]["required"]
    assert fields["size"]["type"] == "enum" and fields["size"]["enum"] == ["large", "small"]
    assert fields["size"]["default"] == "small"
    assert fields["note"]["type"] == "string" and fields["note"]["nullable"]
    assert fields["tags"]["type"] == "json"
    # Anything but an object with properties: one JSON box for the whole answer.
    assert form_fields({"type": "array", "items": {"type": "integer"}}) is None
    assert form_fields({"type": "object"}) is None
    assert form_fields({"$ref": "#/$defs/Missing"}) is None


def test_only_http_urls_become_links() -> None:
    assert link_url(HOSTILE_URL) == HOSTILE_URL
    assert link_url("http://localhost:8080/cb") == "http://localhost:8080/cb"
    for bad in [
        "javascript:alert(1)",
        "JAVASCRIPT:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "//evil.example/x",
        "https://ok.example/\nx",
        "ftp://files.example/x",
        None,
    ]:
        assert link_url(bad) is None, bad
    gate = GateOpened(
        gate_id="g", kind="user_input", execution_id="e", prompt="p", url="javascript:alert(1)"
    )
    [shown] = actions_of({"m": LoopState(gates={"g": gate})})["gates"]
    assert shown["url"] == "javascript:alert(1)" and shown["link"] is None


# -- answering through the inbox -----------------------------------------------------


async def _open_gate(env: Any, sid: str) -> GateOpened:
    from session.embedded.restore import read_states

    async def has_gate() -> bool:
        return any(st.gates for st in (await read_states(env.journal, sid)).values())

    await wait_for(has_gate)
    [gate] = [g for st in (await read_states(env.journal, sid)).values() for g in st.open_gates]
    return gate


async def test_a_form_is_answered_as_data_and_a_bad_field_is_refused_by_its_owner() -> None:
    async with running(principal="dana") as env:
        sid = await env.session("form it", definition="gates", principal="alice")
        gate = await _open_gate(env, sid)
        path = f"/api/sessions/{sid}/gates/{gate.gate_id}"
        r = await env.post(path, {"action": "answer", "data": {"city": "Oslo", "zip": "abc"}})
        assert r.status_code == 409, r.text
        assert "$.zip" in r.json()["error"] and "stays open" in r.json()["error"]
        assert (await _open_gate(env, sid)).gate_id == gate.gate_id
        r = await env.post(path, {"action": "answer", "data": {"city": "Oslo", "zip": 150}})
        assert r.status_code == 200, r.text
        [resolved] = await events_of(env.journal, sid, GateResolved)
        assert resolved.principal == "dana"
        assert resolved.answer is not None and '"zip":150' in resolved.answer

        async def done() -> bool:
            return "shipped lamp to Oslo 150 (small)" in await _text(env, sid)

        await wait_for(done)


async def test_a_form_answer_needs_data_or_json_text() -> None:
    async with running() as env:
        sid = await env.session("form it", definition="gates")
        gate = await _open_gate(env, sid)
        path = f"/api/sessions/{sid}/gates/{gate.gate_id}"
        for body in [
            {"action": "answer"},
            {"action": "answer", "data": {}, "text": "{}"},
            {"action": "answer", "text": "  "},
            {"action": "confirm"},
        ]:
            r = await env.post(path, body)
            assert r.status_code == 400, (body, r.text)
        r = await env.post(path, {"action": "answer", "text": "{not json"})
        assert r.status_code == 409 and "not JSON" in r.json()["error"]
        r = await env.post(path, {"action": "answer", "text": '{"city": "Rome", "zip": 100}'})
        assert r.status_code == 200, r.text


async def test_a_url_gate_is_confirmed_and_one_needing_a_value_gets_it() -> None:
    async with running(principal="erin") as env:
        sid = await env.session("url it", definition="gates", key="u")
        gate = await _open_gate(env, sid)
        assert gate.url == HOSTILE_URL
        path = f"/api/sessions/{sid}/gates/{gate.gate_id}"
        assert (await env.post(path, {"action": "answer", "text": "x"})).status_code == 400
        r = await env.post(path, {"action": "confirm"})
        assert r.status_code == 200, r.text
        [resolved] = await events_of(env.journal, sid, GateResolved)
        assert resolved.answer == URL_CONFIRMED and resolved.principal == "erin"

        sid = await env.session("code it", definition="gates", key="c")
        gate = await _open_gate(env, sid)
        assert gate.needs_value
        path = f"/api/sessions/{sid}/gates/{gate.gate_id}"
        r = await env.post(path, {"action": "confirm", "value": "  "})
        assert r.status_code == 400 and "value" in r.json()["error"]
        r = await env.post(path, {"action": "confirm", "value": "C0DE-42"})
        assert r.status_code == 200, r.text

        async def done() -> bool:
            return "connected bank with code C0DE-42" in await _text(env, sid)

        await wait_for(done)


async def test_the_stream_sends_form_fields_and_a_safe_link() -> None:
    from tests.console.support import TOKEN, SseReader

    async with running() as env:
        sid = await env.session("url it", definition="gates", key="u")
        await _open_gate(env, sid)
        async with SseReader(
            env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
        ) as sse:
            actions = await sse.until("actions", lambda a: bool(a["gates"]))
        [gate] = actions["gates"]
        assert gate["url"] == HOSTILE_URL and gate["link"] == HOSTILE_URL
        assert gate["needs_value"] is False and gate["fields"] is None
        sid = await env.session("form it", definition="gates", key="f")
        await _open_gate(env, sid)
        async with SseReader(
            env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
        ) as sse:
            actions = await sse.until("actions", lambda a: bool(a["gates"]))
        [gate] = actions["gates"]
        assert gate["form"]["required"] == ["city", "zip"]
        assert "<script>document.title='owned'</script>" in gate["form_description"]
        assert [f["name"] for f in gate["fields"]][:2] == ["city", "zip"]


async def test_the_console_principal_is_shown_and_a_bad_one_refused() -> None:
    from session.console.app import create_app

    async with running(principal="dana", host=False) as env:
        page = await env.get("/")
        assert "acting as dana" in page.text
    with pytest.raises(ValueError, match="principal"):
        create_app(trio_clock_journal(), token="t", principal="")
    with pytest.raises(ValueError, match="200"):
        create_app(trio_clock_journal(), token="t", principal="x" * 201)


async def _text(env: Any, sid: str) -> str:
    return render_transcript([r async for r in env.journal.read(sid)])


def _record(seq: int, event: Any) -> Record:
    return Record(
        seq=seq, id=f"r{seq}", session="s", loop="main", at=seq, cause=None, digest=b"", event=event
    )


def test_every_hook_action_and_a_failed_review_read_as_replay_says() -> None:
    events = [
        HookDecided(hook="ctx", point="before_model", action="context", text="it is Monday"),
        HookDecided(hook="halt", point="before_model", action="stop", reason="quota spent"),
        HookDecided(
            hook="guard",
            point="before_tool",
            action="rewrite",
            tool_use_id="tu_1",
            original={"command": "ls"},
            input={"command": "cd /sandbox && ls"},
        ),
        HookDecided(
            hook="mask", point="after_tool", action="replace", tool_use_id="tu_1", reason="pii"
        ),
        HookDecided(
            hook="slow", point="before_tool", action="failed", tool_use_id="tu_2", reason="timeout"
        ),
        GateReviewed(
            tool_use_id="tu_3",
            tool_name="deploy",
            classifier="llm",
            verdict="ask",
            reason="the classifier raised",
            failed=True,
        ),
        GateReviewed(tool_use_id="tu_4", tool_name="rm", classifier="rules", verdict="deny"),
        ToolsLoaded(tools=("atlas", "globe")),
    ]
    records = [_record(i + 1, e) for i, e in enumerate(events)]
    shown = _shown(records)
    assert shown == render_transcript(records)
    for words in [
        "⚑ hook ctx (before_model) added context: it is Monday",
        "⚑ hook halt (before_model) stopped the turn: quota spent",
        "rewrote call tu_1",
        "⚑ hook mask (after_tool) replaced the result of call tu_1: pii",
        "⚑ hook slow (before_tool) failed call tu_2 (the runtime failed closed): timeout",
        "~ classifier llm: ask deploy (failed, so ask): the classifier raised",
        "~ classifier rules: deny rm",
        "(tools loaded: atlas, globe)",
    ]:
        assert words in shown, words
    feed = TranscriptFeed()
    tags = [feed.item(r)["tag"] for r in records]
    assert tags[0] == "hook.decided" and tags[5] == "gate.reviewed" and tags[-1] == "tools.loaded"
