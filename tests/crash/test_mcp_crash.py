"""The host SIGKILLed while an MCP server runs a call: restore makes the call an
unknown effect, and it is never sent again."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from journal import open_journal
from journal.events import LoopReconfigured, Notice, ToolAbandoned, ToolStarted
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel
from session import Session
from session.replay import check
from tests.support import crash_scenarios as scenario
from tests.support.loops import events_of
from tests.support.mcp_servers import calls_of, stdio_server
from tests.support.processes import kill_when_ready

pytestmark = pytest.mark.slow


async def test_host_killed_during_an_mcp_call_leaves_an_unknown_effect(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await kill_when_ready("mcp", url, "s", str(tmp_path))
    server = int((tmp_path / "server.pid").read_text())
    try:
        os.kill(server, signal.SIGKILL)  # orphaned by the host's death
    except ProcessLookupError:
        pass  # it saw its stdin close and ended by itself
    calls = tmp_path / "calls.jsonl"
    assert calls_of(calls) == ["hang"]

    definition = scenario.mcp_definition(tmp_path, [Reply(text="understood")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition) as s:
            await s.wait_idle()
            state = await s.snapshot()
            (unknown,) = state.unknown_effects
            assert unknown.name == "srv__hang"
            # The server is connected again, and the cut call was not re-sent.
            assert "srv__hang" in {t.name for t in s.loops["main"].listed}
            assert calls_of(calls) == ["hang"]
            await s.resolve(unknown.execution_id, "the job was cancelled by hand")
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        (abandoned,) = await events_of(journal, "s", ToolAbandoned)
        (started,) = await events_of(journal, "s", ToolStarted)
        assert (abandoned.execution_id, abandoned.reason) == (started.execution_id, "crashed")
        notices = [n.code for n in await events_of(journal, "s", Notice)]
        assert "unknown_effects" in notices
        assert not (await check(journal, "s")).problems
    assert calls_of(calls) == ["hang"]


async def test_a_replay_safe_call_of_a_tool_that_vanished_is_not_re_run(tmp_path: Path) -> None:
    # The cut call may be re-run (the definition says so), but after the
    # restart the server no longer lists the tool: it cannot be re-run, so its
    # outcome is unknown, as for a tool a deploy removed.
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await kill_when_ready("mcp", url, "s", str(tmp_path))
    server = int((tmp_path / "server.pid").read_text())
    try:
        os.kill(server, signal.SIGKILL)
    except ProcessLookupError:
        pass
    calls = tmp_path / "calls.jsonl"
    definition = LoopDefinition(
        name="mcp",
        model=ScriptedModel([Reply(text="understood")]),
        toolsets=[stdio_server(calls, changed=True, permission="allow", replay_safe=["hang"])],
    )
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition) as s:
            await s.wait_idle()
            (unknown,) = (await s.snapshot()).unknown_effects
            assert unknown.name == "srv__hang"
        (reconfigured,) = await events_of(journal, "s", LoopReconfigured)
        assert ("tool_removed", "srv__hang") in {(c.what, c.name) for c in reconfigured.changes}
        (abandoned,) = await events_of(journal, "s", ToolAbandoned)
        assert (abandoned.execution_id, abandoned.reason) == (unknown.execution_id, "crashed")
        notices = await events_of(journal, "s", Notice)
        # Restore first meant to re-run it; the server's listing said it cannot.
        assert [n.code for n in notices if unknown.execution_id in n.refs] == [
            "replaying",
            "unknown_effects",
        ]
        assert not (await check(journal, "s")).problems
    assert calls_of(calls) == ["hang"]
