"""An MCP server's tool list is part of the loop's recorded configuration: a
tool that vanished or changed its schema between restarts is drift, recorded
and settled by the deploy rules (docs/restore.md, "Deploys").

Against the real test server (tests/support/mcp_server.py) and its next
version (``changed``: ``echo``, ``launch`` and ``hang`` gone, ``add`` with a
third parameter).  Real clock, as the other toolset tests.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from journal import open_journal
from journal.events import (
    ConfigChange,
    GateCancelled,
    LoopConfigured,
    LoopReconfigured,
    Notice,
    ToolAbandoned,
    ToolStarted,
)
from loopruntime import LoopDefinition
from loopruntime.host import digest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.toolsets import McpServer
from session import DefinitionDriftError, Session
from session.replay import check
from tests.support.loops import events_of
from tests.support.mcp_servers import calls_of, stdio_server
from tests.toolsets.test_mcp import calling, results, texts

pytestmark = pytest.mark.slow

SERVED = [
    "srv__add",
    "srv__ask",
    "srv__authorize",
    "srv__connect",
    "srv__echo",
    "srv__fail",
    "srv__hang",
    "srv__launch",
    "srv__picture",
]


def url_of(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'j.db'}"


def definition(
    model: ScriptedModel, calls: Path, *, changed: bool = False, **options: object
) -> LoopDefinition:
    return LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, changed=changed, **options)]
    )


async def started_idle(url: str, d: LoopDefinition) -> None:
    async with open_journal(url) as journal:
        async with Session.create(journal, d, session_id="s") as s:
            await s.wait_idle()


def kinds(changes: tuple[ConfigChange, ...]) -> list[tuple[str, str]]:
    return sorted((c.what, c.name) for c in changes)


async def test_the_listed_tools_are_recorded_when_the_loop_starts(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    async with open_journal(url_of(tmp_path)) as journal:
        async with Session.create(
            journal, definition(ScriptedModel(), calls, permission="allow"), session_id="s"
        ) as s:
            listed = {t.name: t for t in s.loops["main"].listed}
        (configured,) = await events_of(journal, "s", LoopConfigured)
    recorded = {t.name: t for t in configured.config.tools}
    assert sorted(recorded) == SERVED
    schema = msgspec.json.encode(listed["srv__add"].schema.input_schema, order="sorted")
    assert recorded["srv__add"].schema == digest(schema.decode())
    assert recorded["srv__add"].permission == "allow" and recorded["srv__add"].offered
    assert calls_of(calls) == []


async def test_a_restore_records_tools_that_vanished_or_changed_their_schema(
    tmp_path: Path,
) -> None:
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    await started_idle(url, definition(ScriptedModel(), calls))
    # The same server again: nothing to record.
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(ScriptedModel(), calls)) as s:
            await s.wait_idle()
        assert await events_of(journal, "s", LoopReconfigured) == []
    # The server's next version: recorded, even under drift="refuse" (the
    # server changed, not the deploy's definition).
    model = calling(ToolCall(name="srv__echo", input={"text": "x"}))
    changed = definition(model, calls, changed=True)
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", changed, drift="refuse") as s:
            await s.wait_idle()
            assert "srv__echo" not in {t.name for t in s.loops["main"].listed}
            await s.submit("echo x")
            await s.wait_idle()
        (reconfigured,) = await events_of(journal, "s", LoopReconfigured)
        assert kinds(reconfigured.changes) == [
            ("tool_removed", "srv__ask"),
            ("tool_removed", "srv__echo"),
            ("tool_removed", "srv__hang"),
            ("tool_schema", "srv__add"),
            ("tool_schema", "srv__launch"),
        ]
        assert sorted(t.name for t in reconfigured.config.tools) == [
            "srv__add",
            "srv__authorize",
            "srv__connect",
            "srv__fail",
            "srv__launch",
            "srv__picture",
        ]
        assert not (await check(journal, "s")).problems
    # A call of the vanished tool is answered as any call of an unknown tool.
    (answer,) = results(model.requests[1])
    assert answer.is_error and "srv__echo" in texts(answer)
    # Restored with the changed server again: nothing new.
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", changed) as s:
            await s.wait_idle()
        assert len(await events_of(journal, "s", LoopReconfigured)) == 1
    assert calls_of(calls) == []


async def test_a_server_unreachable_at_restore_changes_nothing_recorded(tmp_path: Path) -> None:
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    await started_idle(url, definition(ScriptedModel(), calls))
    gone = McpServer.stdio(str(tmp_path / "no-such-server"), name="srv", connect_attempts=1)
    unreachable = LoopDefinition(name="m", model=ScriptedModel(), toolsets=[gone])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", unreachable, drift="refuse") as s:
            await s.wait_idle()
            assert s.loops["main"].listed == ()
            state = await s.snapshot()
        assert await events_of(journal, "s", LoopReconfigured) == []
    assert state is not None


async def test_a_deploy_that_drops_a_server_is_drift_of_the_definition(tmp_path: Path) -> None:
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    await started_idle(url, definition(ScriptedModel(), calls))
    without = LoopDefinition(name="m", model=ScriptedModel())
    async with open_journal(url) as journal:
        with pytest.raises(DefinitionDriftError, match="tool removed: srv__add") as refused:
            async with Session.restore(journal, "s", without, drift="refuse"):
                pass
        assert len(refused.value.differences) == len(SERVED)
        async with Session.restore(journal, "s", without) as s:
            await s.wait_idle()
        (reconfigured,) = await events_of(journal, "s", LoopReconfigured)
        assert kinds(reconfigured.changes) == [("tool_removed", n) for n in SERVED]


async def test_a_permission_gate_on_a_server_tool_outlives_a_restart(tmp_path: Path) -> None:
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    first = calling(ToolCall(name="srv__echo", input={"text": "hi"}))
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(first, calls), session_id="s") as s:
            await s.submit("echo")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.kind == "permission"
    later = ScriptedModel([Reply(text="echoed")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(later, calls)) as s:
            await s.wait_idle()
            (still,) = (await s.snapshot()).open_gates
            assert still.gate_id == gate.gate_id
            await s.decide(gate.gate_id, allow=True)
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        assert await events_of(journal, "s", GateCancelled) == []
    assert texts(results(later.requests[0])[0]) == "hi"
    assert calls_of(calls) == ["echo"]


async def test_a_permission_gate_on_a_tool_that_vanished_is_cancelled(tmp_path: Path) -> None:
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    first = calling(ToolCall(name="srv__echo", input={"text": "hi"}))
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(first, calls), session_id="s") as s:
            await s.submit("echo")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
    later = ScriptedModel([Reply(text="it is gone")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(later, calls, changed=True)) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.open_gates == [] and state.last_outcome == "completed"
        (cancelled,) = await events_of(journal, "s", GateCancelled)
        assert (cancelled.gate_id, cancelled.reason) == (gate.gate_id, "restore_unavailable")
        notices = await events_of(journal, "s", Notice)
        assert any(n.code == "tool_removed" and gate.gate_id in n.refs for n in notices)
        assert not (await check(journal, "s")).problems
    (answer,) = results(later.requests[0])
    assert answer.is_error and "srv__echo" in texts(answer)
    assert calls_of(calls) == []


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (ToolCall(name="srv__ask", input={"kind": "name"}), "vanished"),
        (ToolCall(name="srv__launch", input={"target": "prod"}), "changed its schema"),
    ],
)
async def test_a_question_of_a_tool_that_vanished_or_changed_becomes_an_unknown_effect(
    tmp_path: Path, call: ToolCall, what: str
) -> None:
    # The server is resumable, so the call would be sent again with its stored
    # answer; the tool is gone, or its input was written for another schema.
    calls, url = tmp_path / "calls.jsonl", url_of(tmp_path)
    first = calling(call)
    async with open_journal(url) as journal:
        async with Session.create(
            journal, definition(first, calls, permission="allow", resumable=True), session_id="s"
        ) as s:
            await s.submit("go")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.kind == "user_input"
    changed = definition(
        ScriptedModel([Reply(text="ok")]), calls, changed=True, permission="allow", resumable=True
    )
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", changed) as s:
            await s.wait_idle()
            state = await s.snapshot()
            assert state.open_gates == [], what
            (unknown,) = state.unknown_effects
            assert unknown.name == call.name
        (cancelled,) = await events_of(journal, "s", GateCancelled)
        assert (cancelled.gate_id, cancelled.reason) == (gate.gate_id, "restore_unavailable")
        (abandoned,) = await events_of(journal, "s", ToolAbandoned)
        (started,) = await events_of(journal, "s", ToolStarted)
        assert (abandoned.execution_id, abandoned.reason) == (
            started.execution_id,
            "restore_unavailable",
        )
        notices = await events_of(journal, "s", Notice)
        assert any(n.code == "unknown_effects" and started.execution_id in n.refs for n in notices)
        assert not (await check(journal, "s")).problems
    # Asked once, never sent again.
    assert len(calls_of(calls)) == 1
