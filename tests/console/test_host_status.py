"""A session no live host can run says so in the console:
"waiting for a host", and whether any live host serves its definition."""

from __future__ import annotations

import msgspec

from journal import HostInfo, SessionInfo
from loopruntime import LoopState
from session.console.views import STATUS_ORDER, session_row, session_status, summary_of
from tests.console.support import running

NOW = 1_000_000_000_000


def waiting(owner: str | None = None, expires: int = 0, definition: str = "nosuch") -> SessionInfo:
    return SessionInfo(
        session="s",
        head=0,
        incarnation=0,
        created_at=0,
        updated_at=1,
        owner=owner,
        expires_at=expires,
        pending=1,
        definition=definition,
    )


def test_entries_no_live_host_holds_are_waiting_for_a_host() -> None:
    empty = summary_of({}, 0)
    assert session_status(empty, waiting(), NOW) == "host"
    assert session_status(empty, waiting("h1", NOW - 1), NOW) == "host"  # its host went away
    assert session_status(empty, waiting("h1", NOW + 1), NOW) == "running"  # being applied
    # A person's work comes first, as ever.
    assert session_status(summary_of({"m": LoopState(turn_open=True)}, 3), waiting(), NOW) == (
        "crashed"
    )
    assert STATUS_ORDER.index("host") < STATUS_ORDER.index("idle")


def test_the_row_says_whether_a_live_host_serves_the_definition() -> None:
    hosts = [
        HostInfo(host="h1", definitions=("echo",), expires_at=NOW + 1, live=True),
        HostInfo(host="h2", definitions=("nosuch",), expires_at=NOW - 1, live=False),
    ]
    row = session_row(waiting(), summary_of({}, 0), now_ns=NOW, hosts=hosts)
    assert (row.status, row.status_text) == ("host", "waiting for a host")
    assert row.detail.startswith("no live host serves definition 'nosuch'")
    served = session_row(waiting(definition="echo"), summary_of({}, 0), now_ns=NOW, hosts=hosts)
    assert served.status == "host"
    assert served.detail == "waits for a host running definition 'echo'"


async def test_the_api_lists_a_session_of_a_definition_no_host_serves() -> None:
    async with running() as env:
        served = await env.session("hello", key="a")
        lost = await env.inbox.create("nosuch", key="c1")
        rows = {r["session"]: r for r in (await env.get("/api/sessions")).json()}
        only = (await env.get("/api/sessions", params={"status": "host"})).json()
    assert rows[served]["status"] == "idle"
    assert rows[lost]["status"] == "host"
    assert rows[lost]["status_text"] == "waiting for a host"
    assert rows[lost]["detail"].startswith("no live host serves definition 'nosuch'")
    assert [r["session"] for r in only] == [lost]


def test_a_session_never_started_says_so() -> None:
    never = msgspec.structs.replace(waiting(), pending=0)
    row = session_row(never, summary_of({}, 0), now_ns=NOW, hosts=[])
    assert row.status == "idle" and row.detail.startswith("never started")
    started = msgspec.structs.replace(never, head=3)
    assert session_row(started, summary_of({}, 3), now_ns=NOW).detail == ""
