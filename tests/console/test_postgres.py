"""The console over the PostgreSQL journal: the list, a session's live stream
(its tail wakes on LISTEN/NOTIFY) and an action through the inbox."""

from __future__ import annotations

import time

import pytest

from journal import open_journal
from journal.events import GateResolved
from tests.console.support import TOKEN, SseReader, running
from tests.support.loops import events_of

pytestmark = pytest.mark.slow


async def test_the_console_over_postgres(postgres_url: str) -> None:
    # Trio's real clock: the host's lease runs on the server's clock, which
    # virtual time jumping during each query would outrun.  Every wait here
    # is for a state; the 600 s bound on the action only guards a hang.
    async with open_journal(postgres_url) as journal:
        # Leases expire by the server's clock: the console reads the wall clock.
        async with running(journal=journal, clock=time.time_ns, wait=600) as env:
            sid = await env.session("book it")
            path = f"/api/sessions/{sid}/events"
            async with SseReader(env.app, path, {"x-console-token": TOKEN}) as sse:
                actions = await sse.until("actions", lambda d: d["gates"])
                [gate] = actions["gates"]
                rows = (await env.get("/api/sessions")).json()
                assert [(r["session"], r["status"], r["owner"]) for r in rows] == [
                    (sid, "waiting", "h1")
                ]
                r = await env.post(
                    f"/api/sessions/{sid}/gates/{gate['gate_id']}", {"action": "allow_once"}
                )
                assert r.status_code == 200, r.text
                done = await sse.until(
                    "items", lambda d: any(i["tag"] == "tool.completed" for i in d)
                )
                assert "Table booked at Chez Loop." in str(done)
            assert len(await events_of(journal, sid, GateResolved)) == 1
