"""Pages a server asks the person to open (URL-mode elicitation): a URL gate
of the call, its confirmation the server's ``accept``.

Against the real test server (tests/support/mcp_server.py, tool
``authorize``); real clock, as the other toolset tests.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import structlog

from journal import open_journal
from journal.content import Text
from journal.events import (
    GateCancelled,
    GateOpened,
    Notice,
    ToolAbandoned,
    ToolCompleted,
    ToolStarted,
)
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from session import Session
from session.console.app import URL_CONFIRMED
from session.replay import check
from tests.support import crash_scenarios as scenario
from tests.support.loops import events_of
from tests.support.mcp_servers import calls_of, http_server, stdio_server
from tests.support.processes import kill_when_ready
from tests.toolsets.test_mcp import calling, results, texts

pytestmark = pytest.mark.slow

CONSENT = scenario.CONSENT


def authorize(url: str = CONSENT) -> ToolCall:
    return ToolCall(name="srv__authorize", input={"service": "crm", "url": url})


async def test_a_page_to_open_is_a_url_gate_and_its_confirmation_accepts(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(authorize())
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("authorize")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.kind == "user_input" and gate.tool_name == "srv__authorize"
            assert gate.url == CONSENT and not gate.needs_value
            assert gate.prompt.startswith("authorize crm\n")
            assert "MCP server srv" in gate.prompt and "'decline'" in gate.prompt
            # What the console answers when a person presses Confirm.
            await s.answer(gate.gate_id, URL_CONFIRMED)
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        (opened,) = await events_of(journal, "s", GateOpened)
        (started,) = await events_of(journal, "s", ToolStarted)
        assert (opened.execution_id, opened.url) == (started.execution_id, CONSENT)
        assert not (await check(journal, "s")).problems
    (result,) = results(model.requests[1])
    assert texts(result) == "crm: accept"
    assert calls_of(calls) == ["authorize", "authorize"]


async def test_over_streamable_http(tmp_path: Path) -> None:
    model = calling(authorize())
    async with http_server(tmp_path / "calls.jsonl") as address:
        from loopruntime.toolsets import McpServer

        server = McpServer.http(address, name="srv", permission="allow")
        definition = LoopDefinition(name="m", model=model, toolsets=[server])
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("authorize")
                await s.wait_idle()
                (gate,) = (await s.snapshot()).open_gates
                assert gate.url == CONSENT
                await s.answer(gate.gate_id, "done")
                await s.wait_idle()
    (result,) = results(model.requests[1])
    assert texts(result) == "crm: accept"


@pytest.mark.parametrize(
    ("answer", "action"),
    [
        ("decline", "decline"),
        ("cancel", "cancel"),
        (" Decline ", "decline"),
        ("CANCEL", "cancel"),
        ("No", "decline"),
    ],
)
async def test_a_page_declined_or_cancelled(tmp_path: Path, answer: str, action: str) -> None:
    model = calling(authorize())
    server = stdio_server(tmp_path / "calls.jsonl", permission="allow")
    definition = LoopDefinition(name="m", model=model, toolsets=[server])
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("authorize")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            await s.answer(gate.gate_id, answer)
            await s.wait_idle()
    (result,) = results(model.requests[1])
    assert texts(result) == f"crm: {action}"


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(document.cookie)",
        "file:///etc/passwd",
        "/relative/consent",
        "data:text/html,<script>x</script>",
    ],
)
async def test_an_address_that_is_not_http_is_declined_without_a_gate(
    tmp_path: Path, url: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(authorize(url))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("authorize")
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
            assert await events_of(journal, "s", GateOpened) == []
    (result,) = results(model.requests[1])
    assert texts(result) == "crm: decline"
    (refused,) = [e for e in logs if e["event"] == "mcp_elicitation_url_refused"]
    assert refused["mcp_server"] == "srv" and refused["tool"] == "srv__authorize"
    assert calls_of(calls) == ["authorize", "authorize"]


async def test_a_page_of_a_resumable_server_outlives_a_restart(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    url = f"sqlite:///{tmp_path / 'j.db'}"

    def definition(model: ScriptedModel) -> LoopDefinition:
        server = stdio_server(calls, permission="allow", resumable=True)
        return LoopDefinition(name="m", model=model, toolsets=[server])

    async with open_journal(url) as journal:
        async with Session.create(journal, definition(calling(authorize())), session_id="s") as s:
            await s.submit("authorize")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
        # The host stopped while the person had the page open: the gate stays.
    later = ScriptedModel([Reply(text="authorized")])
    async with open_journal(url) as journal:
        async with Session.restore(journal, "s", definition(later)) as s:
            await s.wait_idle()
            (still,) = (await s.snapshot()).open_gates
            assert (still.gate_id, still.url) == (gate.gate_id, CONSENT)
            await s.answer(gate.gate_id, URL_CONFIRMED)
            await s.wait_idle()
            assert (await s.snapshot()).last_outcome == "completed"
        # One gate in all: the call sent again asked again, and the stored
        # confirmation answered it.
        assert len(await events_of(journal, "s", GateOpened)) == 1
        assert not (await check(journal, "s")).problems
    (result,) = results(later.requests[0])
    assert texts(result) == "crm: accept"
    assert calls_of(calls) == ["authorize", "authorize", "authorize"]


def connect(url: str = CONSENT) -> ToolCall:
    return ToolCall(name="srv__connect", input={"service": "crm", "url": url})


async def test_pages_a_server_requires_first_are_opened_then_the_call_sent_again(
    tmp_path: Path,
) -> None:
    # The server answers the first call with -32042 (URL elicitation
    # required): it ran nothing, so once the page is confirmed the same call
    # is sent again.
    calls = tmp_path / "calls.jsonl"
    model = calling(connect())
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("connect")
            await s.wait_idle()
            (gate,) = (await s.snapshot()).open_gates
            assert gate.tool_name == "srv__connect" and gate.url == CONSENT
            assert gate.prompt.startswith("connect crm\n")
            assert calls_of(calls) == ["connect"]
            await s.answer(gate.gate_id, URL_CONFIRMED)
            await s.wait_idle()
        (done,) = await events_of(journal, "s", ToolCompleted)
        assert done.disposition == "succeeded"
    (result,) = results(model.requests[1])
    assert texts(result) == "crm: connected"
    assert calls_of(calls) == ["connect", "connect"]


@pytest.mark.parametrize(
    ("url", "answer", "action"),
    [(CONSENT, "decline", "decline"), ("javascript:alert(1)", None, "decline")],
)
async def test_a_required_page_not_accepted_fails_the_call_unsent(
    tmp_path: Path, url: str, answer: str | None, action: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(connect(url))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    async with open_journal("memory://") as journal:
        async with Session.create(journal, definition, session_id="s") as s:
            await s.submit("connect")
            await s.wait_idle()
            if answer is not None:
                (gate,) = (await s.snapshot()).open_gates
                await s.answer(gate.gate_id, answer)
                await s.wait_idle()
            else:
                # Never shown as a link: no gate opened.
                assert await events_of(journal, "s", GateOpened) == []
        (done,) = await events_of(journal, "s", ToolCompleted)
        assert done.disposition == "failed"
    (result,) = results(model.requests[1])
    assert result.is_error
    assert "MCP server srv needs" in texts(result)
    assert f"not accepted ({action})" in texts(result)
    assert calls_of(calls) == ["connect"]


async def test_a_server_that_still_requires_the_page_fails_the_call(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    model = calling(ToolCall(name="srv__connect", input={"service": "locked", "url": CONSENT}))
    definition = LoopDefinition(
        name="m", model=model, toolsets=[stdio_server(calls, permission="allow")]
    )
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("connect")
                await s.wait_idle()
                (gate,) = (await s.snapshot()).open_gates
                await s.answer(gate.gate_id, URL_CONFIRMED)
                await s.wait_idle()
                # Asked again once, not in a loop: one gate in all.
                assert len(await events_of(journal, "s", GateOpened)) == 1
    (result,) = results(model.requests[1])
    assert result.is_error and "still asks for pages to be opened" in texts(result)
    assert calls_of(calls) == ["connect", "connect"]
    (still,) = [e for e in logs if e["event"] == "mcp_pages_still_required"]
    assert still["mcp_server"] == "srv"


def kill_orphaned_server(calls: Path) -> None:
    """SIGKILL the server process the killed host left (it may have ended by
    itself on seeing its stdin close)."""
    pid = json.loads(calls.read_text().splitlines()[0])["pid"]
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("resumable", [True, False])
async def test_the_host_killed_while_a_page_is_open(tmp_path: Path, resumable: bool) -> None:
    calls = tmp_path / "calls.jsonl"
    url = f"sqlite:///{tmp_path / 'j.db'}"
    await kill_when_ready("mcp-url", url, "s", str(tmp_path), "yes" if resumable else "no")
    kill_orphaned_server(calls)
    assert calls_of(calls) == ["authorize"]
    later = [Reply(text="authorized")]
    definition = scenario.mcp_url_definition(tmp_path, later, resumable)
    async with open_journal(url) as journal:
        (gate,) = await events_of(journal, "s", GateOpened)
        assert gate.url == scenario.CONSENT
        async with Session.restore(journal, "s", definition) as s:
            await s.wait_idle()
            state = await s.snapshot()
            if resumable:
                # The page stays to open; confirmed, the call is sent again
                # and the server's question answered with the confirmation.
                (still,) = state.open_gates
                assert (still.gate_id, still.url) == (gate.gate_id, scenario.CONSENT)
                await s.answer(gate.gate_id, URL_CONFIRMED)
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
                (done,) = await events_of(journal, "s", ToolCompleted)
                assert [b.text for b in done.content if isinstance(b, Text)] == ["crm: accept"]
            else:
                # No link left to open for a call that cannot go on: an
                # unknown effect, with a notice, never sent again.
                assert state.open_gates == []
                (unknown,) = state.unknown_effects
                assert unknown.name == "srv__authorize"
                (cancelled,) = await events_of(journal, "s", GateCancelled)
                assert cancelled.gate_id == gate.gate_id
                (abandoned,) = await events_of(journal, "s", ToolAbandoned)
                assert abandoned.execution_id == gate.execution_id
                notices = await events_of(journal, "s", Notice)
                assert any(
                    n.code == "unknown_effects" and abandoned.execution_id in n.refs
                    for n in notices
                )
        assert not (await check(journal, "s")).problems
    expected = ["authorize"] * (3 if resumable else 1)
    assert calls_of(calls) == expected
