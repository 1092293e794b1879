"""Tools from real MCP servers (tests/support/mcp_server.py, written with the SDK).

The server runs as a child process (stdio) or on a loopback port (streamable
HTTP).  These tests run on trio's real clock: a virtual clock would jump while
the loop waits on the server process and fire the guards against a hung child.
Nothing here sleeps; every wait is for the server or the journal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from journal import open_journal
from journal.content import Image, Text, ToolResult
from journal.events import DeadlinePassed, GateOpened, ToolCompleted, ToolStarted, TurnEnded
from loopruntime import LoopDefinition, ToolContext, tool
from loopruntime.model import ModelRequest
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.notices import DENIED_RESULT
from loopruntime.toolsets import McpServer
from session import Session
from session.replay import check
from tests.support.loops import events_of
from tests.support.mcp_server import PIXEL
from tests.support.mcp_servers import Signal, calls_of, http_server, stdio_server

pytestmark = pytest.mark.slow


def calling(*calls: ToolCall, text: str = "done") -> ScriptedModel:
    """A model that asks for ``calls`` in one reply, then answers ``text``."""
    return ScriptedModel([Reply(tool_calls=list(calls)), Reply(text=text)])


def results(request: ModelRequest) -> list[ToolResult]:
    return [b for b in request.messages[-1].blocks if isinstance(b, ToolResult)]


def texts(result: ToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, Text))


async def test_listing_and_calling_over_stdio(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(ToolCall(name="srv__add", input={"a": 2, "b": 3}))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("add")
            await s.wait_idle()
        tools = {t.name: t for t in model.requests[0].tools}
        assert set(tools) == {
            "srv__add",
            "srv__authorize",
            "srv__connect",
            "srv__echo",
            "srv__fail",
            "srv__picture",
            "srv__launch",
            "srv__ask",
            "srv__hang",
        }
        # The server's input schema, passed through unchanged.
        assert tools["srv__add"].input_schema["properties"]["a"]["type"] == "integer"
        assert tools["srv__add"].input_schema["required"] == ["a", "b"]
        assert tools["srv__add"].description == "Add two integers."
        (result,) = results(model.requests[1])
        assert not result.is_error and texts(result) == "5"
        (done,) = await events_of(journal, "s", ToolCompleted)
        assert done.disposition == "succeeded"
        assert done.structured == {"result": 5}
        assert calls_of(calls) == ["add"]
        assert not (await check(journal, "s")).problems


async def test_over_streamable_http(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    async with http_server(calls) as url:
        server = McpServer.http(url, headers={"X-Test": "1"}, name="web", permission="allow")
        model = calling(ToolCall(name="web__echo", input={"text": "over http"}))
        definition = LoopDefinition(name="m", model=model, toolsets=[server])
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("echo")
                await s.wait_idle()
    assert "web__add" in {t.name for t in model.requests[0].tools}
    (result,) = results(model.requests[1])
    assert texts(result) == "over http"
    assert calls_of(calls) == ["echo"]


async def test_errors_are_model_visible_failures(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(
        ToolCall(name="srv__fail", input={"reason": "disk full"}),
        ToolCall(name="srv__echo", input={"text": 7}),  # the server validates the input
    )
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("fail")
            await s.wait_idle()
        failed, invalid = results(model.requests[1])
        assert failed.is_error
        assert "MCP server srv reported an error from fail" in texts(failed)
        assert "disk full" in texts(failed)
        assert invalid.is_error and "echo" in texts(invalid)
        assert [e.disposition for e in await events_of(journal, "s", ToolCompleted)] == [
            "failed",
            "failed",
        ]
        (ended,) = await events_of(journal, "s", TurnEnded)
        assert ended.outcome == "completed"


async def test_a_server_that_cannot_start_is_logged_and_offers_no_tools(tmp_path: Path) -> None:
    broken = McpServer.stdio(str(tmp_path / "no-such-server"), name="gone", connect_attempts=2)
    model = ScriptedModel([Reply(text="fine without it")])
    definition = LoopDefinition(name="m", model=model, toolsets=[broken])
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("hi")
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
    assert model.requests[0].tools == ()
    unavailable = [e for e in logs if e["event"] == "mcp_server_unavailable"]
    assert len(unavailable) == 1 and unavailable[0]["mcp_server"] == "gone"
    assert len([e for e in logs if e["event"] == "mcp_connect_failed"]) == 2


async def test_without_the_sdk_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp now fails
    definition = LoopDefinition(
        name="m",
        model=ScriptedModel([Reply(text="ok")]),
        toolsets=[stdio_server(tmp_path / "calls.jsonl", connect_attempts=1)],
    )
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s"):
                pass
    (unavailable,) = [e for e in logs if e["event"] == "mcp_server_unavailable"]
    assert "loopruntime[mcp]" in unavailable["error"]


def test_loopruntime_imports_without_the_sdk() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "import loopruntime, loopruntime.toolsets, session\n"
        "from loopruntime.toolsets import McpServer\n"
        "McpServer.stdio('x', name='x')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_an_image_result(tmp_path: Path) -> None:
    model = calling(ToolCall(name="srv__picture", input={}))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(tmp_path / "c.jsonl", permission="allow")]
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("draw")
            await s.wait_idle()
        (done,) = await events_of(journal, "s", ToolCompleted)
    import base64

    (image,) = done.content
    assert isinstance(image, Image) and image.media_type == "image/png"
    assert base64.b64decode(image.data) == PIXEL
    (result,) = results(model.requests[1])
    assert result.content == (image,)


async def test_an_elicitation_is_answered_through_a_gate(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(ToolCall(name="srv__launch", input={"target": "prod"}))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("launch")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.kind == "user_input" and gate.tool_name == "srv__launch"
            assert gate.prompt.startswith("launch prod?")
            assert '"approve"' in gate.prompt
            await s.answer(gate.gate_id, '{"approve": true, "note": "go"}')
            await s.wait_idle()
        (result,) = results(model.requests[1])
        assert texts(result) == "launched prod (go)"
        (opened,) = await events_of(journal, "s", GateOpened)
        (started,) = await events_of(journal, "s", ToolStarted)
        assert opened.execution_id == started.execution_id
        assert not (await check(journal, "s")).problems


async def test_an_elicitation_declined(tmp_path: Path) -> None:
    model = calling(ToolCall(name="srv__launch", input={"target": "prod"}))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(tmp_path / "c.jsonl", permission="allow")]
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("launch")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            await s.answer(gate.gate_id, "decline")
            await s.wait_idle()
    (result,) = results(model.requests[1])
    assert texts(result) == "not launched (decline)"


async def test_permission_is_asked_by_default_and_a_denial_never_reaches_the_server(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(ToolCall(name="srv__echo", input={"text": "hi"}))
    definition = LoopDefinition(name="m", model=model, toolsets=[stdio_server(calls)])
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("echo")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.kind == "permission" and gate.tool_name == "srv__echo"
            await s.decide(gate.gate_id, allow=False)
            await s.wait_idle()
        assert await events_of(journal, "s", ToolStarted) == []
    (result,) = results(model.requests[1])
    assert result.is_error and texts(result) == DENIED_RESULT
    assert calls_of(calls) == []


async def test_the_definitions_permissions_override_the_servers(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(ToolCall(name="srv__echo", input={"text": "hi"}))
    definition = LoopDefinition(
        name="m",
        model=model,
        toolsets=[stdio_server(calls)],
        permissions={"srv__echo": "allow"},
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("echo")
            await s.wait_idle()
    assert texts(results(model.requests[1])[0]) == "hi"
    assert calls_of(calls) == ["echo"]


async def test_replay_safe_only_by_opt_in(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    for options, expected in [
        ({}, set()),
        ({"replay_safe": ["echo"]}, {"srv__echo"}),
        ({"trust_annotations": True}, {"srv__add"}),  # add says readOnlyHint
        ({"replay_safe": True}, "all"),
    ]:
        definition = LoopDefinition(
            name="m", model=ScriptedModel(), toolsets=[stdio_server(calls, **options)]
        )
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                listed = s.loops["main"].listed
        safe = {t.name for t in listed if t.replay_safe}
        assert safe == ({t.name for t in listed} if expected == "all" else expected), options


async def test_the_server_killed_during_a_call_is_a_model_visible_failure(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    fifo = Signal(tmp_path / "signal")
    model = ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name="srv__hang", input={"signal": str(fifo.path)})]),
            Reply(tool_calls=[ToolCall(name="srv__echo", input={"text": "back"})]),
            Reply(text="done"),
        ]
    )
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("hang")
                pid = await fifo.wait()
                os.kill(pid, signal.SIGKILL)
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
            completed = await events_of(journal, "s", ToolCompleted)
    await fifo.aclose()
    (cut,) = results(model.requests[1])
    assert cut.is_error
    assert "MCP server srv failed during the call of hang" in texts(cut)
    assert completed[0].disposition == "failed"
    # The next call connected again, to a new server process.
    (echoed,) = results(model.requests[2])
    assert texts(echoed) == "back"
    assert calls_of(calls) == ["hang", "echo"]
    failed = [e for e in logs if e["event"] == "mcp_call_failed"]
    assert failed and failed[0]["mcp_server"] == "srv" and failed[0]["tool"] == "hang"


async def test_a_deadline_cuts_a_server_call(tmp_path: Path, autojump_clock: Any) -> None:
    # Under the virtual clock the call's deadline passes as soon as the loop
    # waits on the server: the call is cut like any tool's.  (No connect
    # timeout: the virtual clock would pass it while the server starts.)
    model = calling(ToolCall(name="srv__hang", input={"signal": str(tmp_path / "none")}))
    server = stdio_server(
        tmp_path / "c.jsonl", permission="allow", timeout=30.0, connect_timeout=None
    )
    definition = LoopDefinition(name="m", model=model, toolsets=[server])
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("hang")
                await s.wait_idle()
                state = await s.snapshot()
                # Not replay-safe, not atomic: its outcome is unknown, never re-sent.
                assert [u.name for u in state.unknown_effects] == ["srv__hang"]
            (passed,) = await events_of(journal, "s", DeadlinePassed)
    assert (passed.deadline, passed.seconds, passed.action) == ("tool", 30.0, "unknown")
    (timed_out,) = [e for e in logs if e["event"] == "mcp_call_timed_out"]
    assert (timed_out["mcp_server"], timed_out["tool"]) == ("srv", "hang")


@tool(permission="allow")
async def add(ctx: ToolContext, *, a: int) -> str:
    """A plain tool."""
    return str(a)


def test_a_toolset_that_is_not_a_server_is_refused() -> None:
    with pytest.raises(TypeError, match=r"toolset .*add.* is a Tool, not an MCP server"):
        LoopDefinition(name="bad", model=ScriptedModel(), toolsets=[add])  # type: ignore[list-item]


def test_servers_with_clashing_tool_names_are_refused() -> None:
    one = McpServer.stdio("a", name="files")
    two = McpServer.http("http://localhost:1/mcp", name="files")
    with pytest.raises(ValueError, match=r"'files' and 'files'.*clashing"):
        LoopDefinition(name="bad", model=ScriptedModel(), toolsets=[one, two])
    three = McpServer.stdio("b", name="web", prefix="")
    with pytest.raises(ValueError, match=r"'files' and 'web'"):
        LoopDefinition(name="bad", model=ScriptedModel(), toolsets=[one, three])


def test_a_plain_tool_under_a_servers_prefix_is_refused() -> None:
    @tool(permission="allow")
    async def files__read(ctx: ToolContext, *, path: str) -> str:
        """Clashes with the server's prefix."""
        return path

    with pytest.raises(ValueError, match=r"files__read.*'files'"):
        LoopDefinition(
            name="bad",
            model=ScriptedModel(),
            tools=[files__read],
            toolsets=[McpServer.stdio("a", name="files")],
        )


def test_server_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="name 'a b'"):
        McpServer.stdio("x", name="a b")
    with pytest.raises(ValueError, match="http:// or https://"):
        McpServer.http("ftp://example.org")
    with pytest.raises(ValueError, match="connect_attempts"):
        McpServer.stdio("x", connect_attempts=0)
    with pytest.raises(ValueError, match="timeout"):
        McpServer.stdio("x", timeout=-1)
    assert McpServer.stdio("/usr/bin/my-server.py").name == "my-server"
    assert McpServer.http("https://tools.example.org:8443/mcp").name == "tools_example_org"


async def test_a_question_of_a_resumable_server_outlives_a_restart(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    url = f"sqlite:///{tmp_path / 'j.db'}"

    def definition(model: ScriptedModel) -> LoopDefinition:
        server = stdio_server(calls, permission="allow", resumable=True)
        return LoopDefinition(name="m", model=model, toolsets=[server])

    first = calling(ToolCall(name="srv__launch", input={"target": "prod"}))
    async with open_journal(url) as journal:
        async with Session.create(journal, definition(first), session_id="s") as s:
            await s.submit("launch")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
        # The host stopped while the call waited on the person: the gate stays open.
    later = ScriptedModel([Reply(text="launched")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(later)) as s:
            await s.wait_idle()
            (still,) = (await s.snapshot()).open_gates
            assert still.gate_id == gate.gate_id
            await s.answer(gate.gate_id, '{"approve": true, "note": "after restart"}')
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        (done,) = await events_of(journal, "s", ToolCompleted)
        assert [b.text for b in done.content if isinstance(b, Text)] == [
            "launched prod (after restart)"
        ]
        assert not (await check(journal, "s")).problems
    # Sent again to the new server process, which asked again and got the stored answer.
    assert calls_of(calls) == ["launch", "launch", "launch"]
