"""Every endpoint of the console over HTTP: status codes and reasons, the
token, cross-site refusal, read-only mode, escaping, the live streams, and
actions through the inbox (applied once, refused when already answered)."""

from __future__ import annotations

import pytest

from journal import inbox as ib
from journal.events import GateResolved, ToolResolved
from tests.console.scenario import HOSTILE
from tests.console.support import BASE, TOKEN, WRITE, SseReader, running, text_of, wait_for
from tests.support.loops import events_of

pytestmark = pytest.mark.usefixtures("autojump_clock")


async def states_of(env, sid: str) -> dict:
    from session.embedded.restore import read_states

    return await read_states(env.journal, sid)


async def open_gate(env, sid: str) -> str:
    async def has_gate() -> bool:
        return any(st.gates for st in (await states_of(env, sid)).values())

    await wait_for(has_gate)
    [gate] = [g for st in (await states_of(env, sid)).values() for g in st.open_gates]
    return gate.gate_id


# -- the token -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/api/sessions", "/api/sessions/events", "/api/sessions/x/tree"]
)
async def test_every_request_without_the_token_is_refused_with_a_reason(path: str) -> None:
    async with running(host=False) as env:
        bare = await env.http.get(path)
        assert bare.status_code == 401
        assert "token" in bare.text and "Traceback" not in bare.text
        wrong = await env.http.get(path, headers={"x-console-token": "nope"})
        assert wrong.status_code == 403


async def test_the_printed_link_sets_a_cookie_and_drops_the_token_from_the_address() -> None:
    async with running(host=False) as env:
        r = await env.http.get(f"/?token={TOKEN}")
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        page = await env.http.get("/")  # the client keeps the cookie
        assert page.status_code == 200 and 'data-page="list"' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        # Other parameters survive the redirect, encoded.
        r = await env.http.get(f"/?status=waiting&token={TOKEN}&x=a%26b")
        assert r.headers["location"] == "/?status=waiting&x=a%26b"
        # A link with a wrong token sets nothing.
        env.http.cookies.clear()
        assert (await env.http.get("/?token=nope")).status_code == 403


async def test_an_html_page_says_what_to_do_and_a_json_call_gets_json() -> None:
    async with running(host=False) as env:
        page = await env.http.get("/", headers={"accept": "text/html"})
        assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
        assert "open the address the console printed" in page.text
        api = await env.http.get("/api/sessions", headers={"accept": "text/html"})
        assert api.json()["error"].startswith("this console needs its token")


# -- state-changing requests ----------------------------------------------------------


async def test_an_action_needs_the_token_in_a_header_not_the_cookie_alone() -> None:
    async with running() as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        await env.http.get(f"/?token={TOKEN}")  # the cookie is set
        path = f"/api/sessions/{sid}/gates/{gate}"
        body = {"action": "allow_once", "key": "k"}
        r = await env.post(path, body, headers={"origin": BASE})
        assert r.status_code == 401 and "X-Console-Token" in r.json()["error"]
        r = await env.post(path, body, headers={**WRITE, "x-console-token": "x"})
        assert r.status_code == 403
        assert await env.journal.entry(sid, "k") is None
        assert await events_of(env.journal, sid, GateResolved) == []


@pytest.mark.parametrize(
    "headers",
    [
        {**WRITE, "origin": "http://evil.example"},
        {**WRITE, "sec-fetch-site": "cross-site"},
        {**WRITE, "sec-fetch-site": "same-site"},
    ],
)
async def test_a_cross_site_action_is_refused_and_sends_nothing(headers: dict[str, str]) -> None:
    async with running() as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        body = {"action": "allow_once", "key": "k"}
        r = await env.post(f"/api/sessions/{sid}/gates/{gate}", body, headers)
        assert r.status_code == 403 and "cross-site request refused" in r.json()["error"]
        assert await env.journal.entry(sid, "k") is None
        assert await events_of(env.journal, sid, GateResolved) == []


async def test_read_only_hides_and_refuses_every_action() -> None:
    async with running(read_only=True) as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        page = await env.get(f"/sessions/{sid}")
        assert 'data-mode="read-only"' in page.text and "read-only</span>" in page.text
        body = {"action": "allow_once", "key": "k"}
        r = await env.post(f"/api/sessions/{sid}/gates/{gate}", body)
        assert r.status_code == 403 and "read-only" in r.json()["error"]
        r = await env.post(f"/api/sessions/{sid}/effects/exe_1", {"result": "x", "key": "r"})
        assert r.status_code == 403
        assert await env.journal.entry(sid, "k") is None
        assert await env.journal.entry(sid, "r") is None


# -- acting ----------------------------------------------------------------------------


async def test_allow_goes_through_the_inbox_once_and_a_second_answer_is_refused() -> None:
    async with running() as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        path = f"/api/sessions/{sid}/gates/{gate}"
        r = await env.post(path, {"action": "allow_once", "key": "k1"})
        assert r.status_code == 200, r.text
        applied = r.json()
        assert applied["status"] == "applied" and applied["key"] == "k1"
        [resolved] = await events_of(env.journal, sid, GateResolved)
        assert (resolved.allow, resolved.scope) == (True, "once")
        # The record the page waits for is the one the command made.
        records = [r async for r in env.journal.read(sid)]
        assert applied["record"] in {r.id for r in records}
        # A retry with the same key is the same command: applied once, and
        # answered with the first one's outcome.
        again = await env.post(path, {"action": "allow_once", "key": "k1"})
        assert again.status_code == 200 and again.json() == applied
        # The key of that command, used for another gate, is refused.
        reused = await env.post(
            f"/api/sessions/{sid}/gates/gate_nope", {"action": "deny", "key": "k1"}
        )
        assert reused.status_code == 409 and "already used for another command" in reused.text
        # Another person's answer (another key) finds the gate closed.
        late = await env.post(path, {"action": "deny", "key": "k2"})
        assert late.status_code == 409
        assert "was already answered at seq" in late.json()["error"]
        assert "allowed" in late.json()["error"]
        entries = [await env.journal.entry(sid, k) for k in ("k1", "k2")]
        assert entries[0] is not None and isinstance(entries[0].command, ib.Decide)
        assert entries[1] is None  # nothing was sent for it
        assert len(await events_of(env.journal, sid, GateResolved)) == 1
        await wait_for(lambda: _has(env, sid, "Done: Table booked at Chez Loop."))


async def _has(env, sid: str, text: str) -> bool:
    return text in await text_of(env.journal, sid)


async def test_allow_for_the_session_and_deny() -> None:
    async with running() as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        r = await env.post(f"/api/sessions/{sid}/gates/{gate}", {"action": "allow_session"})
        assert r.status_code == 200
        [resolved] = await events_of(env.journal, sid, GateResolved)
        assert (resolved.allow, resolved.scope) == (True, "session")
        other = await env.session("book it", key="t")
        gate = await open_gate(env, other)
        assert (
            await env.post(f"/api/sessions/{other}/gates/{gate}", {"action": "deny"})
        ).status_code == 200
        [denied] = await events_of(env.journal, other, GateResolved)
        assert denied.allow is False


async def test_a_question_is_answered_with_one_of_its_choices() -> None:
    async with running() as env:
        sid = await env.session("ask me")
        gate = await open_gate(env, sid)
        path = f"/api/sessions/{sid}/gates/{gate}"
        bad = await env.post(path, {"action": "allow_once"})
        assert bad.status_code == 400 and "asks a question" in bad.json()["error"]
        empty = await env.post(path, {"action": "answer", "text": "  "})
        assert empty.status_code == 400
        r = await env.post(path, {"action": "answer", "text": "blue"})
        assert r.status_code == 200, r.text
        await wait_for(lambda: _has(env, sid, "Done: picked blue"))


async def test_a_refused_answer_says_why_and_the_gate_stays_open() -> None:
    async with running() as env:
        sid = await env.session("ask me")
        gate = await open_gate(env, sid)
        r = await env.post(
            f"/api/sessions/{sid}/gates/{gate}", {"action": "answer", "text": "green"}
        )
        assert r.status_code == 409 and "refused" in r.json()["error"]
        assert [
            g.gate_id for st in (await states_of(env, sid)).values() for g in st.open_gates
        ] == [gate]


async def test_an_unknown_effect_is_resolved_through_the_inbox_once() -> None:
    async with running() as env:
        sid = await env.session("charge it")

        async def unknown() -> bool:
            return any(st.unknown for st in (await states_of(env, sid)).values())

        await wait_for(unknown)
        [effect] = [u for st in (await states_of(env, sid)).values() for u in st.unknown_effects]
        path = f"/api/sessions/{sid}/effects/{effect.execution_id}"
        assert (await env.post(path, {"result": ""})).status_code == 400
        assert (await env.post(path, {"result": "x", "is_error": "yes"})).status_code == 400
        body = {"result": "the provider shows no charge", "is_error": True, "key": "r1"}
        r = await env.post(path, body)
        assert r.status_code == 200, r.text
        [resolved] = await events_of(env.journal, sid, ToolResolved)
        assert resolved.is_error and resolved.execution_id == effect.execution_id
        retried = await env.post(path, body)
        assert retried.status_code == 200 and retried.json() == r.json()
        again = await env.post(path, {"result": "again"})
        assert again.status_code == 409 and "already resolved" in again.json()["error"]
        assert len(await events_of(env.journal, sid, ToolResolved)) == 1
        missing = await env.post(f"/api/sessions/{sid}/effects/exe_nope", {"result": "x"})
        assert missing.status_code == 404


async def test_an_action_no_host_applies_yet_is_reported_as_queued() -> None:
    async with running(wait=1.0) as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        # The host goes away; the command waits in the inbox for the next one.
        assert env.host is not None
        await env.host.aclose()
        r = await env.post(f"/api/sessions/{sid}/gates/{gate}", {"action": "allow_once"})
        assert r.status_code == 202 and r.json()["status"] == "queued"
        assert len(await env.journal.inbox(sid)) == 1


async def test_bad_action_bodies_get_a_reason() -> None:
    async with running() as env:
        sid = await env.session("book it")
        gate = await open_gate(env, sid)
        path = f"/api/sessions/{sid}/gates/{gate}"
        for body, status in (("[1]", 400), ("{", 400)):
            r = await env.http.post(path, content=body, headers=WRITE)
            assert r.status_code == status and "JSON object" in r.json()["error"]
        r = await env.post(path, {"action": "maybe"})
        assert r.status_code == 400 and "allow_once, allow_session or deny" in r.json()["error"]
        assert (await env.post(path, {"action": "deny", "key": ""})).status_code == 400
        long = await env.post(path, {"action": "deny", "key": "k" * 300})
        assert long.status_code == 400 and "k" * 50 not in long.text
        assert (await env.get("/api/sessions/nope/events")).status_code == 404
        assert (
            await env.post(f"/api/sessions/{sid}/gates/gate_nope", {"action": "deny"})
        ).status_code == 404
        assert (await env.post("/api/sessions/nope/gates/g", {"action": "deny"})).status_code == 404
        assert await events_of(env.journal, sid, GateResolved) == []


# -- reading -------------------------------------------------------------------------


async def test_the_session_list_puts_those_waiting_on_a_person_first_and_filters() -> None:
    async with running() as env:
        idle = await env.session("hello", key="a")
        waiting = await env.session("book it", key="b")
        await open_gate(env, waiting)
        rows = (await env.get("/api/sessions")).json()
        assert [r["session"] for r in rows] == [waiting, idle]
        assert [r["status"] for r in rows] == ["waiting", "idle"]
        assert rows[0]["owner"] == "h1" and rows[0]["owner_live"] is True
        assert rows[1]["records"] == await env.journal.head(idle)
        only = (await env.get("/api/sessions", params={"status": "idle"})).json()
        assert [r["session"] for r in only] == [idle]
        bad = await env.get("/api/sessions", params={"status": "sleepy"})
        assert bad.status_code == 400 and "waiting" in bad.json()["error"]


async def test_unknown_sessions_get_a_404_with_a_reason_everywhere() -> None:
    async with running(host=False) as env:
        for path in (
            "/sessions/nope",
            "/api/sessions/nope/events",
            "/api/sessions/nope/tree",
            "/api/sessions/nope/states?seq=1",
            "/api/sessions/nope/records/1",
        ):
            r = await env.get(path)
            assert r.status_code == 404, path
            assert "no session nope" in r.text, path
        page = await env.get("/sessions/nope", headers={"accept": "text/html"})
        assert page.headers["content-type"].startswith("text/html")


async def test_seq_out_of_range_is_a_400_and_a_record_out_of_range_a_404() -> None:
    async with running() as env:
        sid = await env.session("hello")
        head = await env.journal.head(sid)
        for seq in ("0", str(head + 1), "-3"):
            r = await env.get(f"/api/sessions/{sid}/states", params={"seq": seq})
            assert r.status_code == 400 and f"1 to {head}" in r.json()["error"]
        r = await env.get(f"/api/sessions/{sid}/states", params={"seq": "ten"})
        assert r.status_code == 400 and "whole number" in r.json()["error"]
        assert (await env.get(f"/api/sessions/{sid}/states")).status_code == 400
        assert (await env.get(f"/api/sessions/{sid}/records/{head + 1}")).status_code == 404
        assert (await env.get(f"/api/sessions/{sid}/records/0")).status_code == 404


async def test_states_at_a_seq_and_a_records_json() -> None:
    async with running() as env:
        sid = await env.session("hello", "again")
        head = await env.journal.head(sid)
        early = (await env.get(f"/api/sessions/{sid}/states", params={"seq": 4})).json()
        late = (await env.get(f"/api/sessions/{sid}/states", params={"seq": head})).json()
        assert early["text"].startswith("state as of seq 4") and "echo: again" not in early["text"]
        assert "echo: again" in late["text"] and late["head"] == head
        assert late["loops"][0]["messages"] > early["loops"][0]["messages"]
        record = (await env.get(f"/api/sessions/{sid}/records/3")).json()
        assert record["seq"] == 3 and record["session"] == sid and "type" in record["event"]


async def test_the_tree_is_the_replay_tools_json() -> None:
    async with running() as env:
        sid = await env.session("hello")
        tree = (await env.get(f"/api/sessions/{sid}/tree")).json()
        assert tree["schema"] == "loopruntime.replay.tree" and tree["session"] == sid
        assert tree["streams"][0]["definition"] == "console"


async def test_markup_from_the_journal_is_escaped_in_html_and_json() -> None:
    async with running() as env:
        sid = await env.session("page please")
        await wait_for(lambda: _has(env, sid, "Done: "))
        async with SseReader(
            env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
        ) as sse:
            items = await sse.until("items", lambda d: any(i["tag"] == "tool.completed" for i in d))
        [done] = [i for i in items if i["tag"] == "tool.completed"]
        assert HOSTILE in "".join(text for line in done["lines"] for _, text in line["spans"])
        # The 404 page of a session id holding markup shows it escaped.
        page = await env.get(
            "/sessions/<img src=x onerror=alert(1)>", headers={"accept": "text/html"}
        )
        assert page.status_code == 404
        assert "<img" not in page.text and "&lt;img src=x onerror=alert(1)&gt;" in page.text


# -- live streams ------------------------------------------------------------------------


async def test_a_session_stream_sends_history_then_each_new_record_and_the_actions() -> None:
    async with running() as env:
        sid = await env.session("hello")
        head = await env.journal.head(sid)
        async with SseReader(
            env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
        ) as sse:
            items = await sse.until("items")
            assert sse.status == 200
            assert sse.response_headers["content-type"].startswith("text/event-stream")
            assert "content-length" not in sse.response_headers  # the body never ends
            assert [i["seq"] for i in items] == list(range(1, head + 1))
            assert await sse.until("actions") == {"gates": [], "unknown": [], "paused": []}
            assert (await sse.until("ready")) == {"head": head}
            await env.inbox.submit(sid, "book it", key="more")
            gates = await sse.until("actions", lambda d: d["gates"])
            [gate] = gates["gates"]
            assert gate["kind"] == "permission" and gate["tool"] == "book_table"
            r = await env.post(
                f"/api/sessions/{sid}/gates/{gate['gate_id']}", {"action": "allow_once"}
            )
            assert r.status_code == 200
            assert await sse.until("actions", lambda d: not d["gates"]) == {
                "gates": [],
                "unknown": [],
                "paused": [],
            }
            done = await sse.until("items", lambda d: any(i["tag"] == "tool.completed" for i in d))
            assert "Table booked at Chez Loop." in str(done)


async def test_a_reconnecting_page_gets_only_what_it_has_not_seen() -> None:
    async with running() as env:
        sid = await env.session("hello")
        head = await env.journal.head(sid)
        headers = {"x-console-token": TOKEN, "last-event-id": str(head - 2)}
        async with SseReader(env.app, f"/api/sessions/{sid}/events", headers) as sse:
            items = await sse.until("items")
            assert [i["seq"] for i in items] == [head - 1, head]


async def test_streamed_output_reaches_the_page_before_the_message_is_committed() -> None:
    async with running() as env:
        sid = await env.session(key="x")
        async with SseReader(
            env.app, f"/api/sessions/{sid}/events", {"x-console-token": TOKEN}
        ) as sse:
            await sse.until("ready")
            await env.inbox.submit(sid, "stream it", key="x/s")
            seen, committed = "", False
            while not committed:
                for item in await sse.until("items"):
                    stream = item["stream"]
                    if stream and stream["state"] == "more":
                        assert not committed
                        seen += stream["text"]
                        assert item["lines"] == []
                    if item["tag"] == "model.message_committed":
                        committed = True
                        closed = stream
            from tests.console.scenario import STREAMED

            assert seen == STREAMED
            assert closed == {"effect": closed["effect"], "text": "", "state": "closed"}


async def test_the_session_list_stream_sends_the_list_when_it_changes() -> None:
    async with running() as env:
        async with SseReader(env.app, "/api/sessions/events", {"x-console-token": TOKEN}) as sse:
            assert await sse.until("sessions") == []
            sid = await env.session("book it")
            rows = await sse.until("sessions", lambda d: d and d[0]["status"] == "waiting")
            assert rows[0]["session"] == sid


# -- failures ------------------------------------------------------------------------


async def test_a_failing_journal_or_a_bug_is_a_reason_never_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from journal import JournalError

    async with running(host=False) as env:

        async def broken() -> list:
            raise JournalError("the disk went away")

        monkeypatch.setattr(env.journal, "sessions", broken)
        r = await env.get("/api/sessions")
        assert r.status_code == 503 and r.json() == {
            "error": "the journal failed: the disk went away"
        }

        async def bug() -> list:
            raise RuntimeError("secret internals")

        monkeypatch.setattr(env.journal, "sessions", bug)
        r = await env.get("/api/sessions")
        assert r.status_code == 500
        assert "RuntimeError" in r.text and "secret internals" not in r.text
        assert "Traceback" not in r.text


async def test_a_paused_loop_is_shown_and_resumed_through_the_inbox() -> None:
    from journal.events import LoopPaused, LoopResumed

    async with running() as env:
        sid = await env.session()
        await env.inbox.pause(sid, key="p1")
        await env.inbox.wait(sid, "p1")
        rows = {r["session"]: r for r in (await env.get("/api/sessions")).json()}
        assert rows[sid]["status"] == "paused"
        path = f"/api/sessions/{sid}/loops/main"
        assert (await env.post(path, {"action": "stop"})).status_code == 400
        assert (
            await env.post(f"/api/sessions/{sid}/loops/nope", {"action": "resume"})
        ).status_code == 404
        r = await env.post(path, {"action": "resume", "key": "r1"})
        assert r.status_code == 200, r.text
        retried = await env.post(path, {"action": "resume", "key": "r1"})
        assert retried.status_code == 200 and retried.json() == r.json()
        assert len(await events_of(env.journal, sid, LoopPaused)) == 1
        assert len(await events_of(env.journal, sid, LoopResumed)) == 1

        async def listed_as_idle() -> bool:
            rows = {r["session"]: r for r in (await env.get("/api/sessions")).json()}
            return bool(rows[sid]["status"] == "idle")

        await wait_for(listed_as_idle)
