"""A server that answers what is not MCP, a malformed result, nothing at all,
or never starts answering: a model-visible error for that call, a log line
naming the server, never a crashed session; connecting again is bounded, with
backoff.

Against a broken server written by hand (tests/support/mcp_raw_server.py).
The tests that wait on a server that never answers use trio's virtual clock:
it jumps while the loop waits, so each timeout passes at once.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio

from journal import open_journal
from journal.events import DeadlinePassed, ToolCompleted
from loopruntime import LoopDefinition
from loopruntime.models import Reply, ScriptedModel, ToolCall
from loopruntime.toolsets import McpServer
from session import Session
from session.replay import check
from tests.support.loops import events_of
from tests.support.mcp_servers import calls_of
from tests.support.processes import ROOT
from tests.toolsets.test_mcp import results, texts

pytestmark = pytest.mark.slow


def raw_server(calls: Path, mode: str = "serve", **options: Any) -> McpServer:
    options.setdefault("permission", "allow")
    return McpServer.stdio(
        sys.executable,
        ["-m", "tests.support.mcp_raw_server", mode, str(calls)],
        cwd=str(ROOT),
        name="raw",
        **options,
    )


def then_ok(tool: str) -> ScriptedModel:
    """Calls the broken ``tool``, then ``ok`` (a new connection), then answers."""
    return ScriptedModel(
        [
            Reply(tool_calls=[ToolCall(name=f"raw__{tool}", input={})]),
            Reply(tool_calls=[ToolCall(name="raw__ok", input={})]),
            Reply(text="done"),
        ]
    )


@pytest.mark.parametrize(
    ("tool", "said"),
    [
        ("garbage", "it sent something that is not an MCP message"),
        ("malformed", "its answer is not a valid MCP result (content: Input should be a valid"),
    ],
)
async def test_an_answer_that_is_not_mcp_fails_the_call_visibly(
    tmp_path: Path, tool: str, said: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    model = then_ok(tool)
    # The deadline only guards against a hang; it is no part of the behaviour.
    definition = LoopDefinition(name="m", model=model, toolsets=[raw_server(calls, timeout=120)])
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("go")
                await s.wait_idle()
                assert (await s.snapshot()).last_outcome == "completed"
            completed = await events_of(journal, "s", ToolCompleted)
            assert not (await check(journal, "s")).problems
    (broken,) = results(model.requests[1])
    assert broken.is_error
    assert f"MCP server raw failed during the call of {tool}: " in texts(broken)
    assert said in texts(broken)
    assert [c.disposition for c in completed] == ["failed", "succeeded"]
    # The next call connected again and was answered.
    (ok,) = results(model.requests[2])
    assert not ok.is_error and texts(ok) == "fine"
    assert calls_of(calls) == [tool, "ok"]
    failed = [e for e in logs if e["event"] == "mcp_call_failed"]
    assert [(e["mcp_server"], e["tool"]) for e in failed] == [("raw", tool)]
    if tool == "garbage":
        (malformed,) = [e for e in logs if e["event"] == "mcp_malformed_message"]
        assert malformed["mcp_server"] == "raw"


async def test_a_server_that_never_answers_a_call_is_cut_by_its_deadline(
    tmp_path: Path, autojump_clock: Any
) -> None:
    calls = tmp_path / "calls.jsonl"
    model = ScriptedModel([Reply(tool_calls=[ToolCall(name="raw__silent", input={})])])
    server = raw_server(calls, timeout=20.0, connect_timeout=None)
    definition = LoopDefinition(name="m", model=model, toolsets=[server])
    with structlog.testing.capture_logs() as logs:
        async with open_journal("memory://") as journal:
            async with Session.create(journal, definition, session_id="s") as s:
                await s.submit("go")
                await s.wait_idle()
                (unknown,) = (await s.snapshot()).unknown_effects
                assert unknown.name == "raw__silent"
            (passed,) = await events_of(journal, "s", DeadlinePassed)
    assert (passed.deadline, passed.action) == ("tool", "unknown")
    (timed_out,) = [e for e in logs if e["event"] == "mcp_call_timed_out"]
    assert (timed_out["mcp_server"], timed_out["tool"]) == ("raw", "silent")


async def test_a_server_that_never_answers_at_start_is_given_up_with_backoff(
    tmp_path: Path, autojump_clock: Any
) -> None:
    model = ScriptedModel([Reply(text="fine without it")])
    server = raw_server(tmp_path / "calls.jsonl", "mute", connect_timeout=10.0)
    definition = LoopDefinition(name="m", model=model, toolsets=[server])

    def stamped(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        return {**event, "at": trio.current_time()}

    # The attempts' starts are debug lines, below the tests' usual level.
    usual = structlog.get_config()["wrapper_class"]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with structlog.testing.capture_logs(processors=[stamped]) as logs:
            async with open_journal("memory://") as journal:
                async with Session.create(journal, definition, session_id="s") as s:
                    await s.submit("hi")
                    await s.wait_idle()
                    assert (await s.snapshot()).last_outcome == "completed"
    finally:
        structlog.configure(wrapper_class=usual)
    assert model.requests[0].tools == ()
    attempts = [e for e in logs if e["event"] == "mcp_connect_failed"]
    assert [e["attempt"] for e in attempts] == [1, 2, 3]
    assert all(
        e["mcp_server"] == "raw" and "did not answer within 10.0s" in e["error"] for e in attempts
    )
    (unavailable,) = [e for e in logs if e["event"] == "mcp_server_unavailable"]
    assert "could not be reached in 3 attempt(s)" in unavailable["error"]
    # Each attempt waited its 10 s (virtual time); the second began 0.5 s
    # after the first failed, the third 1 s after the second: the backoff doubles.
    began = [e["at"] for e in logs if e["event"] == "mcp_connecting"]
    failed = [e["at"] for e in attempts]
    assert len(began) == 3
    assert all(f - b >= 10.0 for b, f in zip(began, failed, strict=True))
    assert began[1] - failed[0] == pytest.approx(0.5)
    assert began[2] - failed[1] == pytest.approx(1.0)


def test_the_connect_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="connect_timeout"):
        McpServer.stdio("x", connect_timeout=0)
    assert McpServer.stdio("x", connect_timeout=None).connect_timeout is None
