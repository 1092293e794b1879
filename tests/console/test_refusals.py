"""A console action its session's host refuses answers with the host's reason,
and the entry is consumed once."""

from __future__ import annotations

import pytest

from session import Host
from tests.console.scenario import definitions
from tests.console.support import running
from tests.console.test_http import open_gate

pytestmark = pytest.mark.usefixtures("autojump_clock")


async def test_an_action_from_a_principal_the_host_does_not_know_says_why() -> None:
    async with (
        running(host=False, principal="bob") as env,
        Host.open(env.journal, definitions(), host_id="h1", poll=0.05, principals={"alice"}),
    ):
        sid = await env.inbox.create("console", key="c", principal="alice")
        await env.inbox.submit(sid, "book it", key="m", principal="alice")
        gate = await open_gate(env, sid)
        answer = await env.post(
            f"/api/sessions/{sid}/gates/{gate}", {"action": "allow_once", "key": "k"}
        )
        assert answer.status_code == 409
        said = answer.json()["error"]
        assert said.startswith("the session refused it: principal 'bob' is not one host h1")
        entry = await env.journal.entry(sid, "k")
        assert entry is not None and entry.consumed
        assert entry.outcome is not None and entry.outcome.error == "UnknownPrincipalError"
        assert await env.journal.inbox(sid) == []
